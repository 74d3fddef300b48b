/* loopopt cuda kernel for Conv2d(8, 16, kernel_size=(3, 3), padding=(1, 1), bias=True, batch=2, height=10, width=10)
 * step 1: split('k', 8)
 * step 2: reorder('n', 'k_o', 'oh', 'ow', 'k_i')
 * step 3: bind('k_o', 'block.x')
 * step 4: bind('oh', 'block.y')
 * step 5: bind('ow', 'thread.x')
 * step 6: bind('k_i', 'thread.y')
 * layouts: I NCHW, W OIHW, O NCHW
 * loops: n[2], k_o[2] (block.x), oh[10] (block.y), ow[10] (thread.x), k_i[8] (thread.y), c[8], kh[3], kw[3]
 * grid (2, 10, 1), block (10, 8, 1); 1 accumulator(s) per thread from loop depth 5; each output stored once (bias + sum)
 */
#include <stddef.h>
#include <cuda_runtime.h>

__global__ void lo_nest(const float *__restrict__ I, const float *__restrict__ W, const float *__restrict__ B, float *__restrict__ O)
{
    for (int n = 0; n < 2; ++n) {
        { const int k_o = (int) blockIdx.x;   /* 2 iterations on block.x */
            { const int oh = (int) blockIdx.y;   /* 10 iterations on block.y */
                { const int ow = (int) threadIdx.x;   /* 10 iterations on thread.x */
                    { const int k_i = (int) threadIdx.y;   /* 8 iterations on thread.y */
                        const int k = (8*k_o + k_i);
                        {
                            float lo_acc = 0.0f;
                            for (int c = 0; c < 8; ++c) {
                                for (int kh = 0; kh < 3; ++kh) {
                                    if (0 <= ((oh + kh) - 1) && ((oh + kh) - 1) < 10) {
                                        for (int kw = 0; kw < 3; ++kw) {
                                            if (0 <= ((ow + kw) - 1) && ((ow + kw) - 1) < 10) {
                                                lo_acc += I[(((800*n + 100*c) + 10*((oh + kh) - 1)) + ((ow + kw) - 1))] * W[(((72*k + 9*c) + 3*kh) + kw)];
                                            }
                                        }
                                    }
                                }
                            }
                            O[(((1600*n + 100*k) + 10*oh) + ow)] = B[k] + lo_acc;
                        }
                    }
                }
            }
        }
    }
}

extern "C" int lo_kernel(const float *I, const float *W, const float *B, float *O, void *lo_stream)
{
    lo_nest<<<dim3(2, 10, 1), dim3(10, 8, 1), 0, (cudaStream_t) lo_stream>>>(I, W, B, O);
    return (int) cudaGetLastError();
}

extern "C" const char *lo_error_string(int code)
{
    return cudaGetErrorString((cudaError_t) code);
}
