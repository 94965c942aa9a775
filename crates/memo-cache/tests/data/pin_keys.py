"""Recomputes the keys pinned in tests/hashing.rs (`hashes_are_pinned`) from the
encoding documented in memo_cache::key (and memo_cache::lm), independently of the Rust code.
Run: python3 tests/data/pin_keys.py"""
import hashlib, struct
def L(n): return struct.pack('<Q', n)
def text(s): b=s.encode(); return L(len(b))+b
def val(v):
    t,x=v
    if t=='null': return b'\0'
    if t=='bool': return bytes([1, int(x)])
    if t=='int': return b'\2'+struct.pack('<q',x)
    if t=='float': return b'\3'+struct.pack('<d',x)
    if t=='text': return b'\4'+text(x)
    if t=='list': return b'\5'+L(len(x))+b''.join(val(i) for i in x)
    if t=='map': return b'\6'+mapenc(x)
    if t=='secret': return b'\7'+text(x)
def mapenc(m):
    return L(len(m))+b''.join(text(k)+val(m[k]) for k in sorted(m, key=lambda k:k.encode()))
def digest(parts):
    h=hashlib.sha256()
    for p in parts: h.update(L(len(p))); h.update(p)
    return h.digest()
def pairs(fs):
    # By name (bytewise); pairs of one name keep their given order (sorted() is stable).
    return [text(k)+val(v) for k,v in sorted(fs, key=lambda kv: kv[0].encode())]
question=('text','What is 2+2?')
context=('map',{'n':('int',-3),'t':('float',0.5),'ok':('bool',True),'xs':('list',[('null',None),('text','x')])})
inp=digest([b'memo-cache/input/v2']+pairs([('question',question),('context',context)]))
lm=digest([b'memo-cache/lm-config/v2', text('small-model'), b'\1'+text('sk-test-0000')]+pairs([('temperature',('float',0.0)),('max_tokens',('int',256))]))
def demo(i,o): return mapenc(i)+mapenc(o)
demos=sorted([demo({'question':('text','1+1?')},{'answer':('text','2')}), demo({'question':('text','3+3?')},{'answer':('text','6')})])
st=digest([b'memo-cache/predictor-state/v1', text('question -> answer'), text('Answer briefly.')]+demos)
call=digest([b'memo-cache/call/v1', lm, st, inp])
# A name given twice: its values keep their order (the last one wins for most consumers).
dup_in=digest([b'memo-cache/input/v2']+pairs([('n',('int',2)),('m',('text','x')),('n',('int',1))]))
dup_lm=digest([b'memo-cache/lm-config/v2', text('small-model'), b'\0']+pairs([('temperature',('float',0.7)),('temperature',('float',0.0))]))
# The generic KeyBuilder: its tag raw, then one part per call, each opening with its kind.
B=lambda v: val(v)
builder=digest([b'memo-cache/pin/v1', b'\x0c'+text('tenant-a'), B(('text','matmul')), B(('int',-3)),
    b'\x09'+struct.pack('<Q',7), B(('float',-0.0)), B(('bool',True)), b'\x08'+L(2)+b'\x00\x01',
    b'\x0b'+digest([b'k']), B(context),
    b'\x0a'+L(3)+b''.join(pairs([('n',('int',2)),('m',('text','x')),('n',('int',1))]))])
for n,k in [('input',inp),('lm',lm),('state',st),('call',call),('dup_input',dup_in),('dup_lm',dup_lm),('builder',builder)]: print(n,k.hex())
