# model_tests.cmake — ctest registrations for model/ (CPU, fast: well under a minute).
tower_add_test(NAME test_layers_gradcheck
  SOURCES test_layers_gradcheck.c gradcheck.c
  LIBS tower_model)
tower_add_test(NAME test_layers_known
  SOURCES test_layers_known.c gradcheck.c
  LIBS tower_model)
tower_add_test(NAME test_model_spec
  SOURCES test_model_spec.c
  LIBS tower_model)
tower_add_test(NAME test_model_gradcheck
  SOURCES test_model_gradcheck.c gradcheck.c
  LIBS tower_model)
tower_add_test(NAME test_model_threads
  SOURCES test_model_threads.c gradcheck.c
  LIBS tower_model Threads::Threads)
tower_add_test(NAME test_layers_new_gradcheck
  SOURCES test_layers_new_gradcheck.c gradcheck.c
  LIBS tower_model)
