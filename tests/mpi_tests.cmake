# Tests of training across MPI ranks (docs/hosts.md), label `mpi`: several
# ranks on loopback against one process with the same global batch, resume,
# and a killed rank.  Skipped (77) where mpirun is missing or this build has
# no MPI.
add_test(NAME test_mpi_train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_train.sh $<TARGET_FILE:tower>)
set_tests_properties(test_mpi_train PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 600)
# mobilenet_v2's batch norm statistics across ranks: 2 ranks x 1 tower = 1 process x 2 towers, byte for byte.
add_test(NAME test_mobilenet_mpi
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mobilenet_mpi.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_imagefolder>)
set_tests_properties(test_mobilenet_mpi PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 300)
