# tests/io_tests.cmake — tests of io/ (TFRecord, Example, converters,
# pipeline) and of `tower convert` / `tower inspect`.  All CPU-only and fast;
# the TensorFlow interoperability test carries the label `interop` and exits
# 77 (skipped) where `import tensorflow` fails.
tower_add_test(NAME test_escape SOURCES test_escape.c LIBS tower_io)
tower_add_test(NAME test_io_crc32c SOURCES test_io_crc32c.c LIBS tower_io)
tower_add_test(NAME test_io_tfrecord SOURCES test_io_tfrecord.c LIBS tower_io)
tower_add_test(NAME test_io_example SOURCES test_io_example.c LIBS tower_io)
tower_add_test(NAME test_io_pipeline SOURCES test_io_pipeline.c LIBS tower_io)
tower_add_test(NAME test_io_pipeline_imagefolder SOURCES test_io_pipeline_imagefolder.c LIBS tower_io)
tower_add_test(NAME test_io_pipeline_encoded SOURCES test_io_pipeline_encoded.c LIBS tower_io)
tower_add_test(NAME test_io_convert SOURCES test_io_convert.c LIBS tower_io)
# readdir and opendir wrapped, to fail a listing part way through (a read error is not the end of a directory).
tower_add_test(NAME test_io_list_fault SOURCES test_io_list_fault.c LIBS tower_io)
target_link_options(test_io_list_fault PRIVATE -Wl,--wrap=readdir,--wrap=opendir)
# The subcommands' own sources, linked into the test (cmd/main.c is not needed).
tower_add_test(NAME test_io_cli
  SOURCES test_io_cli.c ${CMAKE_SOURCE_DIR}/cmd/cmd_convert.c ${CMAKE_SOURCE_DIR}/cmd/cmd_inspect.c ${CMAKE_SOURCE_DIR}/base/flags.c
          ${CMAKE_SOURCE_DIR}/cmd/progress.c ${CMAKE_SOURCE_DIR}/cmd/cmd_util.c
  LIBS tower_io tower_ps tower_model)
tower_add_test(NAME test_io_fuzz SOURCES test_io_fuzz.c LIBS tower_io)

# TensorFlow interoperability (label interop): TensorFlow writes, Tower reads,
# and the other way round; `tower convert` too once cmd/ builds the binary.
add_executable(test_io_interop_helper test_io_interop_helper.c)
target_link_libraries(test_io_interop_helper PRIVATE tower_io)
if(TARGET tower)
  set(TOWER_IO_INTEROP_TOWER $<TARGET_FILE:tower>)
endif()
add_test(NAME test_io_interop_tensorflow
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/interop/run_tf_interop.sh $<TARGET_FILE:test_io_interop_helper> ${TOWER_IO_INTEROP_TOWER})
set_tests_properties(test_io_interop_tensorflow PROPERTIES SKIP_RETURN_CODE 77 LABELS interop TIMEOUT 600)

# The class list (labels.txt) through the `tower` binary: convert, train and eval refuse lists that disagree,
# a count other than --num_classes, and a labels file that is not a regular file.
if(TARGET tower)
  add_test(NAME test_io_labels_cli
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_io_labels_cli.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_imagefolder>)
  set_tests_properties(test_io_labels_cli PROPERTIES TIMEOUT 300)
endif()
