# Tests of the `tower` binary and its wiring (cmd/).
add_test(NAME test_cli_doc COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_cli_doc.sh $<TARGET_FILE:tower> ${CMAKE_SOURCE_DIR}/docs/cli.md)
# Command-line refusals (exit 2, one exact line), -h/--version/help, data hints, bench's output paths.
add_test(NAME test_cli_refusals COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_cli_refusals.sh $<TARGET_FILE:tower>)
# OpenMP's wait policy: passive unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set (cmd/main.c's second start).
add_test(NAME test_omp_wait_policy COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_omp_wait_policy.sh $<TARGET_FILE:tower>)
set_tests_properties(test_omp_wait_policy PROPERTIES SKIP_RETURN_CODE 77)
foreach(t test_train_resume test_train_fashion_mnist test_train_errors test_train_guard)
  add_test(NAME ${t} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${t}.sh $<TARGET_FILE:tower>)
  set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77 LABELS train)
endforeach()
# The benchmark programs' flags (bench/, built with TOWER_BENCH): --help, and a bad value refused in one line.
if(TOWER_BENCH)
  add_test(NAME test_bench_flags COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_flags.sh
           $<TARGET_FILE:bench_model> $<TARGET_FILE:bench_pipeline> $<TARGET_FILE:bench_ps> $<TARGET_FILE:bench_layers>
           $<TARGET_FILE:bench_conv> $<TARGET_FILE:bench_imagefolder> $<TARGET_FILE:gen_records>)
endif()
# tower eval --eval_interval_secs: watching a train_dir while it trains (the events read back by test_events).
add_test(NAME test_eval_watch COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_eval_watch.sh $<TARGET_FILE:tower>
         $<TARGET_FILE:test_fault_helper> $<TARGET_FILE:test_events>)
set_tests_properties(test_eval_watch PROPERTIES LABELS train TIMEOUT 300)
# The learning-rate schedules against TensorFlow's and Keras's (label interop; 77 without TensorFlow).
add_test(NAME test_lr_interop
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/interop/run_lr_interop.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_fault_helper>)
set_tests_properties(test_lr_interop PROPERTIES SKIP_RETURN_CODE 77 LABELS interop TIMEOUT 600)
