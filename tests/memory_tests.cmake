# tests/memory_tests.cmake — bounded memory: `tower train` over a
# generated data set many times its shuffle buffer keeps its peak RSS within
# the bound it prints (trainer_max_n_bytes), and the peak does not grow when
# the data grows tenfold.  bench/run_memory_bench.sh does the work at a
# CI-friendly size (300 MiB of 64x64x3 records against a tenth of them, each
# configuration trained twice, --runs 2: the bound checks take the higher
# peak, the growth checks the lower, since a peak only gains noise under CPU
# contention; one to two minutes on 2 cores); its --check_response run
# (two 20-step runs on the full set, the shuffle buffer 8192 records apart)
# proves the measurement sees a growth of 96 MiB.  The same script at 2 GiB is the benchmark
# (bench/RESULTS.md).  Needs bench/gen_records (TOWER_BENCH); skipped (77)
# under the sanitizers, whose shadow memory no bound of Tower's covers.
if(TARGET tower AND TOWER_BENCH)
  if(TOWER_SANITIZE OR TOWER_SANITIZE_THREAD)
    add_test(NAME test_memory_bound COMMAND sh -c "echo 'skipped: peak RSS under the address sanitizer is not bounded by Tower'; exit 77")
  else()
    add_test(NAME test_memory_bound
      COMMAND bash ${CMAKE_SOURCE_DIR}/bench/run_memory_bench.sh --tower $<TARGET_FILE:tower>
              --gen $<TARGET_FILE:gen_records> --n_mb 300 --min_after_dequeue 200 --max_growth_mib 8 --check_response --runs 2)
  endif()
  set_tests_properties(test_memory_bound PROPERTIES SKIP_RETURN_CODE 77 LABELS memory TIMEOUT 600)
endif()
