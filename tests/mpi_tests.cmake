# Tests of training across MPI ranks (docs/hosts.md), label `mpi`: several
# ranks on loopback against one process with the same global batch, resume,
# and a killed rank.  Skipped (77) where mpirun is missing or this build has
# no MPI.
add_test(NAME test_mpi_train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_train.sh $<TARGET_FILE:tower>)
set_tests_properties(test_mpi_train PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 600)

# --variable_update parameter_server across ranks (train/mode_ps_mpi.c):
# 1, 2 and 4 ranks against one process, both networks on synthetic data,
# sgd, momentum and adam, checkpoint + resume, the placement log.
add_executable(test_mpi_ps_helper test_mpi_ps_helper.c)
target_link_libraries(test_mpi_ps_helper PRIVATE tower_train m)
add_test(NAME test_mpi_ps COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_ps.sh $<TARGET_FILE:test_mpi_ps_helper>)
set_tests_properties(test_mpi_ps PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 900)
# mobilenet_v2's batch norm statistics across ranks: 2 ranks x 1 tower = 1 process x 2 towers, byte for byte.
add_test(NAME test_mobilenet_mpi
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mobilenet_mpi.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_imagefolder>)
set_tests_properties(test_mobilenet_mpi PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 300)
# --sync_replicas false (train/mode_ps_async.c): one worker bitwise ps_mpi,
# Fashion-MNIST at 4 ranks within 2 points of synchronous, staleness within
# its bound, --max_staleness 0 lockstep, bad flags, resume, a killed rank.
add_test(NAME test_mpi_async
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_async.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_mpi_ps_helper>)
set_tests_properties(test_mpi_async PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 900)
