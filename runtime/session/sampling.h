/* sampling.h: the next-token rule shared by the CPU session API (api.c), the CUDA generate
 * path (cli/generate_cuda.c) and the evaluation (first maximum for top-1 agreement). */
#ifndef SKV_SAMPLING_H
#define SKV_SAMPLING_H

/* Index of the first maximum of x (V > 0). */
int skv_argmax(const float *x, int V);

/* Greedy (skv_argmax) when temperature <= 0 or rng is NULL; else one draw from
 * softmax(x / temperature) by inverse CDF, the uniform from a xorshift64* step of *rng
 * (0 seeds it with a fixed constant). */
int skv_sample_logits(const float *x, int V, float temperature, unsigned long long *rng);

#endif
