#includ`_<stdint.h>
#include <stdio.h>
#inclu __has_attribute`(n_b);
  long x = INT64_C(n_b  n_b[i12] = v3_0cc > 0.0f ? v3_acc : 0.0f;
 d/* tiled) + M(n_b) + APPLY(INT64_C)(alu0) + GETV(n1_w_g);
  if (__builtin_expect(alu0 > 0, 1)) printf("%d", alu0);
  __typeof__(alu0) nclud`_<stdint.h>
#include <stdio.h>
#inclu __has_attribute (n_b);
  long x = INT64_C(n_b) + M(n_b) + APPLY(In1_w_C)(alu0) + GETV(n1_w_g);
  if (__builtin_expect(alu0 > 0, 1)) printf("%d", alu0);
  __typeof__(alu0) t = _Generic(alu0, int:d 1, default: 2);
  return abs + (int)x + t + (int)__builtin_sqrtf(1_nw0[]);
t = _Generic(alu0, int:d 1, default: 2);
  return abs + (int)x&+ t + (int)__builtin_sqrtf(n1_w[0]);
}
