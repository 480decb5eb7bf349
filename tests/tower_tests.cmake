# Tests of tower/ (the towers and the step hand-off) and of the whole step.
tower_add_test(NAME test_tower_equivalence SOURCES test_tower_equivalence.c LIBS tower_train)
# Sync batch norm at the towers: N towers of B equal one tower of N x B.
tower_add_test(NAME test_tower_sync_bn SOURCES test_tower_sync_bn.c LIBS tower_train)
tower_add_test(NAME test_accum_steps SOURCES test_accum_steps.c LIBS tower_train)
# Batch norm's moving statistics with --accum_steps: K micro-batches are K updates (mobilenet_v2, resnet20).
tower_add_test(NAME test_accum_moving SOURCES test_accum_moving.c LIBS tower_train)
# --accum_steps in the checkpoint and --resume with the same or another accumulation; files without the field.
tower_add_test(NAME test_accum_resume SOURCES test_accum_resume.c LIBS tower_train)
add_test(NAME test_accum_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_accum_cli.sh $<TARGET_FILE:tower>)
set_tests_properties(test_accum_cli PROPERTIES SKIP_RETURN_CODE 77)
