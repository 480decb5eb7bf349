# bench/gpu.cmake — bench_gpu: GPU towers' images/sec and step breakdown,
# and (--per_layer) one model's GPU time node by node (model/model_cuda.h);
# bench_bn_cuda: our batch-norm kernels against cuDNN's on the networks'
# batch-norm shapes (issue 15).
# Built only with CUDA: bench/CMakeLists.txt includes this file when
# TOWER_HAVE_CUDA.  bench/run_gpu_bench.sh runs bench_gpu beside
# bench/pytorch_gpu.py; scripts/gpu-check.sh's profile stage runs both.
add_executable(bench_gpu ${CMAKE_CURRENT_LIST_DIR}/bench_gpu.c)
target_link_libraries(bench_gpu PRIVATE tower_train tower_model_cuda tower_base)

# It calls cuDNN itself, beside tower_model_cuda's kernels.
add_executable(bench_bn_cuda ${CMAKE_CURRENT_LIST_DIR}/bench_bn_cuda.cu)
target_include_directories(bench_bn_cuda PRIVATE ${CUDNN_INCLUDE_DIR})
target_link_libraries(bench_bn_cuda PRIVATE tower_model_cuda tower_base CUDA::cudart ${CUDNN_LIBRARY})
