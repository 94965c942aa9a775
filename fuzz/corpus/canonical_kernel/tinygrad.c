n1_w n_b sqrtf tmp_
void r_4_4(float* restrict data0_16, const float* restrict data1_16) {
  for (int Lidx0 = 0; Lidx0 < 4; Lidx0++) {
    float val0 = (*(data1_16+Lidx0));
    float alu0 = (val0*2.0f);
    *(data0_16+Lidx0) = alu0;
  }
}
