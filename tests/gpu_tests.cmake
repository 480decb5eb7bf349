# Tests of the GPU towers (model/*_cuda.cu, tower/tower_cuda.c) and of the
# GPU variable placement modes (ps/ps_gpu.cu, ps/allreduce_nccl.cu), label
# `gpu`.  Built only with CUDA; each exits 77 (skipped) when no GPU is
# usable, so `ctest -L gpu` is safe everywhere.  test_modes_gpu_plan checks
# what of the GPU modes needs no GPU, in every build.
tower_add_test(NAME test_modes_gpu_plan SOURCES test_modes_gpu_plan.c LIBS tower_train)
if(TOWER_HAVE_CUDA)
  tower_add_test(NAME test_gpu_layers SOURCES test_gpu_layers.c LIBS tower_model_cuda LABELS gpu)
  tower_add_test(NAME test_gpu_model SOURCES test_gpu_model.c LIBS tower_model_cuda LABELS gpu)
  tower_add_test(NAME test_gpu_tower_equivalence SOURCES test_gpu_tower_equivalence.c LIBS tower_train LABELS gpu)
  tower_add_test(NAME test_gpu_ps_kernels SOURCES test_gpu_ps_kernels.c LIBS tower_ps_cuda tower_model LABELS gpu)
  tower_add_test(NAME test_gpu_modes SOURCES test_gpu_modes.c LIBS tower_train LABELS gpu)
  if(TARGET tower)
    add_test(NAME test_gpu_train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_train.sh $<TARGET_FILE:tower>)
    set_tests_properties(test_gpu_train PROPERTIES SKIP_RETURN_CODE 77 LABELS "gpu;train")
    add_test(NAME test_gpu_modes_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_modes_cli.sh $<TARGET_FILE:tower>)
    set_tests_properties(test_gpu_modes_cli PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
  endif()
endif()
