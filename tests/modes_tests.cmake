# Tests of the variable placement modes (docs/modes.md): the host ring
# all-reduce, every mode's trajectory against parameter_server/cpu, the
# --trace timeline and `tower bench`'s table, CSV and SVG.
tower_add_test(NAME test_modes_allreduce SOURCES test_modes_allreduce.c LIBS tower_ps Threads::Threads)
tower_add_test(NAME test_modes_equivalence SOURCES test_modes_equivalence.c LIBS tower_train)
add_test(NAME test_modes_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_modes_cli.sh $<TARGET_FILE:tower>)
set_tests_properties(test_modes_cli PROPERTIES SKIP_RETURN_CODE 77)
# tower bench --predict_nets / --predict_hosts: the tables and their formulas (an assumed device rate: nothing trained).
add_test(NAME test_bench_predict COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_predict.sh $<TARGET_FILE:tower>)
# mobilenet_v2 (batch norm's moving statistics, --batch_norm tower) in every CPU mode, resume, AdamW, eval mode.
tower_add_test(NAME test_mobilenet_train SOURCES test_mobilenet_train.c LIBS tower_train)
if(TARGET tower)
  # tower train/eval/export --model mobilenet_v2 on an image folder, and its flags' refusals.
  add_test(NAME test_mobilenet_cli
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mobilenet_cli.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_imagefolder>)
  set_tests_properties(test_mobilenet_cli PROPERTIES LABELS train TIMEOUT 300)
endif()
