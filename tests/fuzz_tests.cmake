# tests/fuzz_tests.cmake — the fuzz targets of tests/fuzz/, one per parser of
# untrusted bytes (TFRecord, Example and its checks, checkpoint and its index,
# IDX, CIFAR-10, PNG/JPEG).  Each target is built twice:
#   fuzz_<name>_replay  always (gcc or clang): the target plus fuzz_replay.c,
#                       registered as the ctest fuzz_<name> (label `fuzz`)
#                       over tests/fuzz/regress/<name> (every input that
#                       ever broke a parser) and tests/fuzz/corpus/<name>
#                       (a small committed seed set), so the normal suite
#                       and its sanitizer build re-run them;
#   fuzz_<name>         with TOWER_FUZZ=ON (clang): linked with libFuzzer,
#                       run by scripts/fuzz.sh.
# fuzz_seed_tool makes the seeds scripts/fuzz-corpus.sh cannot make in a shell.
set(TOWER_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)

# tower_fuzz_target(NAME name SOURCES a.c... LIBS libs... [DEFINES d...])
function(tower_fuzz_target)
  cmake_parse_arguments(F "" "NAME" "SOURCES;LIBS;DEFINES" ${ARGN})
  set(srcs ${F_SOURCES} ${TOWER_FUZZ_DIR}/fuzz_common.c)
  add_executable(fuzz_${F_NAME}_replay ${srcs} ${TOWER_FUZZ_DIR}/fuzz_replay.c)
  set(exes fuzz_${F_NAME}_replay)
  if(TOWER_FUZZ)
    add_executable(fuzz_${F_NAME} ${srcs})
    target_link_options(fuzz_${F_NAME} PRIVATE -fsanitize=fuzzer)
    list(APPEND exes fuzz_${F_NAME})
  endif()
  foreach(exe ${exes})
    target_include_directories(${exe} PRIVATE ${TOWER_FUZZ_DIR})
    target_compile_definitions(${exe} PRIVATE ${F_DEFINES})
    target_link_libraries(${exe} PRIVATE ${F_LIBS} m)
  endforeach()
  # The regression directory of a target appears with its first finding.
  add_test(NAME fuzz_${F_NAME}
    COMMAND fuzz_${F_NAME}_replay --optional=${TOWER_FUZZ_DIR}/regress/${F_NAME} ${TOWER_FUZZ_DIR}/corpus/${F_NAME})
  set_tests_properties(fuzz_${F_NAME} PROPERTIES LABELS fuzz)
endfunction()

# The TFRecord reader is compiled into its target with a 64-byte input
# buffer, so that small inputs cross every refill path of the file reader.
tower_fuzz_target(NAME tfrecord
  SOURCES ${TOWER_FUZZ_DIR}/fuzz_tfrecord.c ${CMAKE_SOURCE_DIR}/io/tfrecord.c ${CMAKE_SOURCE_DIR}/io/crc32c.c
  DEFINES TFR_IN_BUFFER_N_BYTES=64
  LIBS ZLIB::ZLIB)
tower_fuzz_target(NAME example SOURCES ${TOWER_FUZZ_DIR}/fuzz_example.c LIBS tower_io)
tower_fuzz_target(NAME checkpoint SOURCES ${TOWER_FUZZ_DIR}/fuzz_checkpoint.c LIBS tower_ps)
# The raw-dataset converters read through io/gzfile.c, compiled into their
# targets with a 64-byte input buffer for the same reason (the copy in
# tower_io is then not linked: its symbols are defined already).
tower_fuzz_target(NAME idx SOURCES ${TOWER_FUZZ_DIR}/fuzz_idx.c ${CMAKE_SOURCE_DIR}/io/gzfile.c
  DEFINES GZFILE_IN_BUFFER_N_BYTES=64 LIBS tower_io)
tower_fuzz_target(NAME cifar10 SOURCES ${TOWER_FUZZ_DIR}/fuzz_cifar10.c ${CMAKE_SOURCE_DIR}/io/gzfile.c
  DEFINES GZFILE_IN_BUFFER_N_BYTES=64 LIBS tower_io)
tower_fuzz_target(NAME image SOURCES ${TOWER_FUZZ_DIR}/fuzz_image.c LIBS tower_io)

add_executable(fuzz_seed_tool ${TOWER_FUZZ_DIR}/fuzz_seed_tool.c)
target_link_libraries(fuzz_seed_tool PRIVATE tower_io tower_ps)
