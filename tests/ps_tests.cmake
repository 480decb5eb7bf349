# ps/ tests: optimizer, schedule and moving average against hand arithmetic;
# averaging order and determinism; checkpoints (round trip, crash safety,
# corruption, mismatches, retention).
tower_add_test(NAME test_ps_optimizer SOURCES test_ps_optimizer.c LIBS tower_ps)
tower_add_test(NAME test_ps_average SOURCES test_ps_average.c LIBS tower_ps)
tower_add_test(NAME test_ps_checkpoint SOURCES test_ps_checkpoint.c LIBS tower_ps)

# The optimizer table against TensorFlow's optimizers on the same gradients
# (label interop; skipped, 77, without a Python that imports tensorflow).
add_executable(test_optim_interop_helper test_optim_interop_helper.c)
target_link_libraries(test_optim_interop_helper PRIVATE tower_ps m)
add_test(NAME test_optim_interop_tensorflow
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/interop/run_optim_interop.sh $<TARGET_FILE:test_optim_interop_helper>)
set_tests_properties(test_optim_interop_tensorflow PROPERTIES SKIP_RETURN_CODE 77 LABELS interop TIMEOUT 600)
tower_add_test(NAME test_ps_placement SOURCES test_ps_placement.c LIBS tower_ps)
