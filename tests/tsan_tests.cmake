# tests/tsan_tests.cmake — the ThreadSanitizer build's own check (label
# `tsan`, only with TOWER_SANITIZE_THREAD; scripts/test-tsan.sh runs the CPU
# suite under the sanitizer): test_tsan_canary races on purpose, through
# pthreads and through an OpenMP loop, and the script expects a report from
# each and none from the same work done right, so a sanitizer that sees
# nothing, or one that calls every OpenMP region a race (gcc's libgomp,
# whose barriers it cannot see: tried, the canary fails), fails here.
if(TOWER_SANITIZE_THREAD)
  add_executable(test_tsan_canary test_tsan_canary.c)
  target_link_libraries(test_tsan_canary PRIVATE OpenMP::OpenMP_C Threads::Threads)
  add_test(NAME test_tsan_canary COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_tsan_canary.sh $<TARGET_FILE:test_tsan_canary>)
  set_tests_properties(test_tsan_canary PROPERTIES LABELS tsan TIMEOUT 120)
endif()
