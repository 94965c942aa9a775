n1_w n_b sqrtf tmp_
struct S { int i1; int x; };
int k__seg2(struct S *s) { int acc = 0;
 for (int i1 = 0; i1 < 2; ++i1) acc += s-> /* c */ i1 + s.// c 
i1;
 return acc; }
