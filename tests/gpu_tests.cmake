# Tests of the GPU towers (model/*_cuda.cu, tower/tower_cuda.c), label `gpu`.
# Built only with CUDA; each exits 77 (skipped) when no GPU is usable, so
# `ctest -L gpu` is safe everywhere.
if(TOWER_HAVE_CUDA)
  tower_add_test(NAME test_gpu_layers SOURCES test_gpu_layers.c LIBS tower_model_cuda LABELS gpu)
  tower_add_test(NAME test_gpu_model SOURCES test_gpu_model.c LIBS tower_model_cuda LABELS gpu)
  tower_add_test(NAME test_gpu_tower_equivalence SOURCES test_gpu_tower_equivalence.c
                 LIBS tower_towers tower_ps LABELS gpu)
  if(TARGET tower)
    add_test(NAME test_gpu_train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_train.sh $<TARGET_FILE:tower>)
    set_tests_properties(test_gpu_train PROPERTIES SKIP_RETURN_CODE 77 LABELS "gpu;train")
  endif()
endif()
