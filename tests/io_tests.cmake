# tests/io_tests.cmake — tests of io/ (TFRecord, Example, converters,
# pipeline) and of `tower convert` / `tower inspect`.  All CPU-only and fast;
# the TensorFlow interoperability test carries the label `interop` and exits
# 77 (skipped) where `import tensorflow` fails.
tower_add_test(NAME test_io_crc32c SOURCES test_io_crc32c.c LIBS tower_io)
tower_add_test(NAME test_io_tfrecord SOURCES test_io_tfrecord.c LIBS tower_io)
tower_add_test(NAME test_io_example SOURCES test_io_example.c LIBS tower_io)
tower_add_test(NAME test_io_pipeline SOURCES test_io_pipeline.c LIBS tower_io)
