n1_w n_b sqrtf tmp_
int i\
1 = 2; /* *\
/ */ s = "a\\\
 b"; // cx$y ??= [[gnu::unused]] int v2_t;
