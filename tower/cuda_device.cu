/* cuda_device.cu — what the CUDA backend knows of the machine's GPUs.
 *
 * Where it sits: tower/, built only with TOWER_CUDA.  It answers "how many
 * usable GPUs are there, and what are they" without ever crashing when the
 * driver or the device is missing (a clear message instead).  The GPU towers
 * themselves (cuDNN/cuBLAS layers, pinned copies) come with the GPU issue.
 */
#include <cuda_runtime.h>
#include <stdio.h>

#include "base/cuda_check.h"

extern "C" int tower_cuda_device_count(char *err, size_t err_n_bytes) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary) {
        /* No NVIDIA driver (or an older one than the runtime): the usual CPU-only machine, not an alarm. */
        snprintf(err, err_n_bytes, "no GPU driver found (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
        return -1;
    }
    if (e == cudaErrorNoDevice) {
        snprintf(err, err_n_bytes, "no GPU found (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
        return -1;
    }
    if (e != cudaSuccess) {
        snprintf(err, err_n_bytes, "no usable GPU: cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return -1;
    }
    return n;
}

extern "C" void tower_cuda_describe_device(int device, char *out, size_t out_n_bytes) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        snprintf(out, out_n_bytes, "/gpu:%d (unknown)", device);
        return;
    }
    snprintf(out, out_n_bytes, "/gpu:%d (%s, %.1f GiB, compute capability %d.%d)", device, p.name,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), p.major, p.minor);
}
