n1_w n_b sqrtf tmp_
const char *x = "i1 \"v1_t\" \\"; char c = '\''; int y = L'a' + u'b' + 0x1p-3 + 1.5e+3f + .5 + 07;
int i1 = 1; // don't 1'000
