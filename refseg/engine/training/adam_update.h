/* Adam's elementwise update on float32 parameters, the same arithmetic as the reference
   kernel (autograd/_optim.pxi: each value widened to double, the update in double without
   contraction, each result rounded once to float) in AVX-512 or AVX2 vectors of doubles, so
   that every parameter and moment comes out bit for bit as the reference's. Called by
   engine/training/_adam.pxi. */
#ifndef REFSEG_ADAM_UPDATE_H
#define REFSEG_ADAM_UPDATE_H

#include <stdint.h>

/* backend: 2 AVX-512F, 1 AVX2, 0 plain C (the caller checks the CPU) */
void refseg_adam_update_f(int backend, int threads, float *param, const float *grad,
                          float *m, float *v, int64_t n, double lr, double beta1,
                          double beta2, double eps, double bias1, double bias2);

#endif
