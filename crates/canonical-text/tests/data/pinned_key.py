# Independent computation of PINNED_KEY in tests/properties.rs (python3 pinned_key.py).
# The format: the text's UTF-8 bytes as written, each renamed name replaced by 0xFF and its
# number (LEB128), the own name by 0xFE; key = SHA-256 over the parts [domain, "R" (the own name keyed by its role;
# "K" + kernel token when keyed as spelled), encoding, extras],
# each prefixed by its length as a little-endian u64.
import hashlib, re, struct

text = ("/* relu over n17_x */\n#define TILE 64\n"
        "void step__seg3(const float *restrict n17_x, float *restrict n18_y) {\n"
        "  for (int i12 = 0; i12 < TILE; ++i12) {\n"
        "    float v3_t = n17_x[i12];\n"
        "    n18_y[i12] = v3_t > 0.0f ? v3_t : 0.0f; // max(v3_t, 0)\n"
        "  }\n}\n")

def leb(n):
    out = b''
    while n >= 0x80:
        out += bytes([(n & 0x7f) | 0x80]); n >>= 7
    return out + bytes([n])

nums, enc, last = {}, b'', 0
for m in re.finditer(r'[A-Za-z_][A-Za-z0-9_]*', text):
    w = m.group(0)
    if w in ('n17_x', 'n18_y', 'i12', 'v3_t', 'step__seg3'):
        enc += text[last:m.start()].encode()
        if w == 'step__seg3':
            enc += b'\xfe'
        else:
            nums.setdefault(w, len(nums))
            enc += b'\xff' + leb(nums[w])
        last = m.end()
enc += text[last:].encode()
h = hashlib.sha256()
for p in [b'kcache canonical-text v8 -- the key of a kernel encoding', b'R', enc, b'-O3']:
    h.update(struct.pack('<Q', len(p))); h.update(p)
print(h.hexdigest())
