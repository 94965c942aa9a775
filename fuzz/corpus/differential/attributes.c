typedef float float4 __attribute__((aligned(16),vector_size(16)));
static inline __attribute__((always_inline)) int n_b(int alu0) { return alu0 + n1_w; }
struct __attribute((packed)) s { char n_b; int n1_w; };
__declspec(noinline) int k__seg1(int n1_w);
void f(void) __attribute__ /* c */ ((n_b, alias("n1_w")));
[[gnu::aligned(__builtin_COLUMN())]] int n_b_g;
int c = __builtin_COLUMN(); __builtin_dump_struct(&n_b, printf);
puts(__STRING(n_b)); int __CONCAT(n1_, w) = INT64_C(alu0) + _Generic(n_b, int: 1);
_Bool n1_w = __builtin_isnan(alu0) ? 0 : 1; __restrict__ float* __tvm_x; __pool3[alu0] = 0;
asm volatile("add %1, %0" : "=r"(n_b) : "r"(alu0));
__asm("" : "+r"(n1_w)); __asm__ __volatile__("" : : "r"(alu0) : "memory");
puts(__FUNCDNAME__); puts(__FUNCTION__); int _X = __LINE__ + __COUNTER__;
