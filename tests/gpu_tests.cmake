# Tests of the GPU towers (model/*_cuda.cu, tower/tower_cuda.c) and of the
# GPU variable placement modes (ps/ps_gpu.cu, ps/allreduce_nccl.cu), label
# `gpu`.  Built only with CUDA; each exits 77 (skipped) when no GPU is
# usable, so `ctest -L gpu` is safe everywhere, and fails instead under
# TOWER_TEST_REQUIRE_GPU=1 (scripts/gpu-check.sh sets it).  The mode matrix
# (test_gpu_modes, test_gpu_modes_cli) also carries the label `gpu_modes`,
# so that the GPU check runs it in a device call of its own (`ctest -L gpu
# -LE gpu_modes`, then `ctest -L gpu_modes`), each within 10 minutes.
# What needs no GPU runs in every build: test_modes_gpu_plan (the GPU modes'
# planning), test_conv_algo (the cuDNN algorithm rule), and, with CUDA,
# test_gpu_require (skip -> failure under TOWER_TEST_REQUIRE_GPU) and
# test_cmake_cuda_find (the wheel-style versioned library names); and
# test_gpu_check_deps (scripts/gpu-check.sh up to the GPU).
tower_add_test(NAME test_modes_gpu_plan SOURCES test_modes_gpu_plan.c LIBS tower_train)
tower_add_test(NAME test_conv_algo SOURCES test_conv_algo.c LIBS tower_model)
if(TOWER_HAVE_CUDA)
  tower_add_test(NAME test_gpu_layers SOURCES test_gpu_layers.c LIBS tower_model_cuda LABELS gpu)
  tower_add_test(NAME test_gpu_model SOURCES test_gpu_model.c LIBS tower_model_cuda LABELS gpu)
  # Both again with TOWER_BN_CUDA_FUSED=1: batch norm's small-map kernels (and the graph node's fused
  # activation in them) against the CPU.
  add_test(NAME test_gpu_layers_bn_fused COMMAND test_gpu_layers)
  add_test(NAME test_gpu_model_bn_fused COMMAND test_gpu_model)
  set_tests_properties(test_gpu_layers_bn_fused test_gpu_model_bn_fused PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu
                       ENVIRONMENT TOWER_BN_CUDA_FUSED=1)
  # The networks with every stride-1, symmetrically padded convolution's input gradient as a forward
  # convolution with the flipped filter (TOWER_CONV_DGRAD_FORWARD=1), against the CPU.
  add_test(NAME test_gpu_model_dgrad_forward COMMAND test_gpu_model)
  set_tests_properties(test_gpu_model_dgrad_forward PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu
                       ENVIRONMENT TOWER_CONV_DGRAD_FORWARD=1)
  # The executor's per-node timing (model_acts_cuda_profile), which bench_gpu --per_layer prints.
  tower_add_test(NAME test_gpu_profile SOURCES test_gpu_profile.c LIBS tower_model_cuda LABELS gpu)
  tower_add_test(NAME test_gpu_tower_equivalence SOURCES test_gpu_tower_equivalence.c LIBS tower_train LABELS gpu)
  tower_add_test(NAME test_gpu_ps_kernels SOURCES test_gpu_ps_kernels.c LIBS tower_ps_cuda tower_model LABELS gpu)
  tower_add_test(NAME test_gpu_modes SOURCES test_gpu_modes.c LIBS tower_train LABELS "gpu;gpu_modes")
  # The overlapped copies (the default: a second stream, chunk by chunk) bitwise TOWER_GPU_OVERLAP=0's plain copies.
  tower_add_test(NAME test_gpu_overlap SOURCES test_gpu_overlap.c LIBS tower_train LABELS gpu)
  # Sync batch norm on GPU towers (the executor's host round trip per layer), built by tower_tests.cmake.
  add_test(NAME test_gpu_sync_bn COMMAND test_tower_sync_bn cuda)
  set_tests_properties(test_gpu_sync_bn PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
  if(TARGET tower)
    add_test(NAME test_gpu_train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_train.sh $<TARGET_FILE:tower>)
    set_tests_properties(test_gpu_train PROPERTIES SKIP_RETURN_CODE 77 LABELS "gpu;train")
    add_test(NAME test_gpu_modes_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_modes_cli.sh $<TARGET_FILE:tower>)
    set_tests_properties(test_gpu_modes_cli PROPERTIES SKIP_RETURN_CODE 77 LABELS "gpu;gpu_modes")
    # replicated_nccl_mpi: in one process against replicated_nccl, and across 2 ranks where mpirun and 2 GPUs are.
    add_test(NAME test_gpu_nccl_mpi COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_nccl_mpi.sh $<TARGET_FILE:tower>)
    set_tests_properties(test_gpu_nccl_mpi PROPERTIES SKIP_RETURN_CODE 77 LABELS "gpu;gpu_modes")
    add_test(NAME test_gpu_require
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_require.sh $<TARGET_FILE:test_gpu_layers>
                     ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_train.sh $<TARGET_FILE:tower>)
    set_tests_properties(test_gpu_require PROPERTIES SKIP_RETURN_CODE 77)
  endif()
  add_test(NAME test_cmake_cuda_find
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_cmake_cuda_find.sh ${CMAKE_SOURCE_DIR} ${CMAKE_CUDA_COMPILER})
  set_tests_properties(test_cmake_cuda_find PROPERTIES SKIP_RETURN_CODE 77 LABELS cmake)
endif()
# scripts/gpu-check.sh up to the GPU: usage, a missing carry, and (with
# .gpu-carry made by scripts/gpu-carry.sh, and nvcc) its deps stage.
add_test(NAME test_gpu_check_deps COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_check_deps.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(test_gpu_check_deps PROPERTIES SKIP_RETURN_CODE 77 LABELS cmake)
if(TOWER_HAVE_CUDA)
  # test_accum_steps.c on GPU towers (ps_gpu, replicated_nccl): --accum_steps and --loss_scaling.
  tower_add_test(NAME test_gpu_accum_steps SOURCES test_accum_steps.c LIBS tower_train LABELS gpu)
  target_compile_definitions(test_gpu_accum_steps PRIVATE TOWER_ACCUM_GPU)
  # test_accum_moving.c on GPU towers: batch norm's moving statistics with --accum_steps.
  tower_add_test(NAME test_gpu_accum_moving SOURCES test_accum_moving.c LIBS tower_train LABELS gpu)
  target_compile_definitions(test_gpu_accum_moving PRIVATE TOWER_ACCUM_GPU)
endif()
