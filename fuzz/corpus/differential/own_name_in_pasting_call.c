#include <stdint.h>
#include <stdio.h>
#include "other.h"
#ifndef __has_builtin
#defC(a)
#def1(float *n1_w, long n_b, int alu0) {
  int abs = __has_builtin(abs) + __is_identifier(alu0) + __has_attribute (n_b);
  long x = INT64_C(ine APPLY(m0
#en) m
int k__seg1(float *n1_w, long n_b, int alu0) {
  int abs = __has_builtin(abs) + __is_identifier(alu0) + __has_attribute (n_b);
  long x = INT64_C(n_b) n_b) + APPLYhINT64_C)(alu0) + GETV(n1_w_g);
  if (__builtin_expect(alu0 > 0, 1)) printf("%d", alu0);
  __typeof__(alu0) t = _Generic(alu0, int: 1, default: 2);
  return abs + (int)x + t + (int)__builtin_sqrtf(n1_w[0]);
}
