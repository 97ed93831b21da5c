// hostdevice.h: the one host/device marker.
//
// Headers that both the reference (g++) and the kernels (nvcc) compile — number formats,
// the layout header, scalar KV accessors — mark their functions KVLAB_HD so the GPU code
// indexes and decodes through the *same* functions as the reference.
#pragma once

#if defined(__CUDACC__)
#define KVLAB_HD __host__ __device__ __forceinline__
#define KVLAB_HD_NOINLINE __host__ __device__
#else
#define KVLAB_HD inline
#define KVLAB_HD_NOINLINE
#endif
