# tests/io_tests.cmake — tests of io/ (TFRecord, Example, converters,
# pipeline) and of `tower convert` / `tower inspect`.  All CPU-only and fast;
# the TensorFlow interoperability test carries the label `interop` and exits
# 77 (skipped) where `import tensorflow` fails.
tower_add_test(NAME test_io_crc32c SOURCES test_io_crc32c.c LIBS tower_io)
tower_add_test(NAME test_io_tfrecord SOURCES test_io_tfrecord.c LIBS tower_io)
tower_add_test(NAME test_io_example SOURCES test_io_example.c LIBS tower_io)
tower_add_test(NAME test_io_pipeline SOURCES test_io_pipeline.c LIBS tower_io)
tower_add_test(NAME test_io_convert SOURCES test_io_convert.c LIBS tower_io)
# The subcommands' own sources, linked into the test (cmd/main.c is not needed).
tower_add_test(NAME test_io_cli
  SOURCES test_io_cli.c ${CMAKE_SOURCE_DIR}/cmd/cmd_convert.c ${CMAKE_SOURCE_DIR}/cmd/cmd_inspect.c ${CMAKE_SOURCE_DIR}/cmd/flags.c
  LIBS tower_io)
tower_add_test(NAME test_io_fuzz SOURCES test_io_fuzz.c LIBS tower_io)
