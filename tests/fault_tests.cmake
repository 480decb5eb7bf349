# tests/fault_tests.cmake — faults a long training run meets, through the
# `tower` binary (label `fault`): kill -9 at random moments (test_fault_kill),
# a full disk while writing (test_fault_disk), checkpoints that are corrupt or
# of another model (test_fault_ckpt), TFRecord files truncated or deleted
# under a running pipeline (test_fault_input), standard output on a full
# disk and a conversion stopped by a signal (test_fault_output); and a short training run under
# valgrind memcheck (label `valgrind`; not in the sanitizer build, where
# valgrind cannot run).  test_fault_helper makes the synthetic data, checks a
# train dir's checkpoints and forges wrong-content checkpoints for the tests.
add_executable(test_fault_helper test_fault_helper.c)
target_link_libraries(test_fault_helper PRIVATE tower_ps)

if(TARGET tower)
  foreach(t test_fault_kill test_fault_ckpt test_fault_input test_fault_output)
    add_test(NAME ${t} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${t}.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_fault_helper>)
  endforeach()
  # The full disk twice: a file-size limit (always runs, but in the ThreadSanitizer build) and a small tmpfs
  # (skips where mount is refused).  The ThreadSanitizer build (clang) runs LLVM's OpenMP runtime, which
  # writes a shared-memory registration file when it starts and dies of SIGBUS under a small `ulimit -f`
  # (a plain clang -fopenmp program dies of SIGXFSZ under `ulimit -f 0`): the runtime's limit, not Tower's;
  # the gcc builds (libgomp) run this test, and the tmpfs one runs in all.
  if(TOWER_SANITIZE_THREAD)
    add_test(NAME test_fault_disk COMMAND sh -c "echo 'skipped: LLVM OpenMP (the ThreadSanitizer build) cannot start under ulimit -f'; exit 77")
  else()
    add_test(NAME test_fault_disk
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_fault_disk.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_fault_helper> ulimit)
  endif()
  add_test(NAME test_fault_disk_tmpfs
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_fault_disk.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_fault_helper> tmpfs)
  set_tests_properties(test_fault_kill test_fault_ckpt test_fault_input test_fault_output test_fault_disk test_fault_disk_tmpfs
    PROPERTIES SKIP_RETURN_CODE 77 LABELS fault TIMEOUT 300)
  if(NOT TOWER_SANITIZE AND NOT TOWER_SANITIZE_THREAD)
    add_test(NAME test_fault_valgrind
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_fault_valgrind.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_fault_helper>
              ${CMAKE_CURRENT_SOURCE_DIR}/valgrind.supp)
    set_tests_properties(test_fault_valgrind PROPERTIES SKIP_RETURN_CODE 77 LABELS valgrind TIMEOUT 900)
  endif()
endif()
