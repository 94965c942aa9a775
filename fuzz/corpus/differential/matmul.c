/* tiled matmul over n1_w */
#define TILE 4
void k__seg1(const float *restrict n1_w, float *restrict n_b) {
  #pragma GCC ivdep
  for (int i12 = 0; i12 < 64; ++i12) {
    float v3_acc = n1_w[i12] * 2.0f; // relu
    n_b[i12] = v3_acc > 0.0f ? v3_acc : 0.0f;
  }
}
