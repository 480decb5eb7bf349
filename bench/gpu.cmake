# bench/gpu.cmake — bench_gpu: GPU towers' images/sec and step breakdown,
# and (--per_layer) one model's GPU time node by node (model/model_cuda.h).
# Built only with CUDA: bench/CMakeLists.txt includes this file when
# TOWER_HAVE_CUDA.  bench/run_gpu_bench.sh runs it beside bench/pytorch_gpu.py.
add_executable(bench_gpu ${CMAKE_CURRENT_LIST_DIR}/bench_gpu.c)
target_link_libraries(bench_gpu PRIVATE tower_train tower_model_cuda tower_base)
