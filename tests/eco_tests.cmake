# tests/eco_tests.cmake — tests of the ecosystem features: TensorBoard event
# files (io/events.h), the safetensors writer (ps/safetensors.h), image-folder
# datasets (io/imagefolder.h), the progress line (cmd/progress.h), and all of
# them through the `tower` binary (test_eco_cli.sh: convert an image folder,
# train, eval, export, the terminal and non-terminal output).  The checks by
# TensorBoard's, safetensors' and Pillow's own code carry the label `interop` and
# exit 77 (skipped) where `import tensorboard` / `import safetensors` / `import PIL` fails.
tower_add_test(NAME test_events SOURCES test_events.c LIBS tower_io tower_ps)
tower_add_test(NAME test_safetensors SOURCES test_safetensors.c LIBS tower_ps)
tower_add_test(NAME test_imagefolder SOURCES test_imagefolder.c LIBS tower_io)
# The resizer's paths the loader does not pick here, each against the same oracle as test_imagefolder's:
# io/imagefolder.c compiled on its own without the AVX2 clones (the SSE2 pass) and as plain C.
foreach(path BASELINE SCALAR)
  string(TOLOWER ${path} name)
  tower_add_test(NAME test_resize_${name} SOURCES test_resize_paths.c ${CMAKE_SOURCE_DIR}/io/imagefolder.c
                 LIBS tower_io)  # for libpng, libjpeg and base/ (its own imagefolder.o is not pulled in)
  target_include_directories(test_resize_${name} PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_definitions(test_resize_${name} PRIVATE IMAGEFOLDER_RESIZE_${path} RESIZE_PATH_NAME="${name}")
endforeach()
tower_add_test(NAME test_progress SOURCES test_progress.c ${CMAKE_SOURCE_DIR}/cmd/progress.c LIBS m)
# The image folders' decode + resize against PIL's on the same files (Pillow's own code).
add_test(NAME test_pil_interop
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/interop/run_pil_interop.sh $<TARGET_FILE:test_imagefolder>)
set_tests_properties(test_pil_interop PROPERTIES SKIP_RETURN_CODE 77 LABELS interop TIMEOUT 300)
# The training random crop against TensorFlow's sample_distorted_bounding_box (its distribution) and PIL (its pixels).
add_test(NAME test_crop_interop
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/interop/run_crop_interop.sh $<TARGET_FILE:test_imagefolder>)
set_tests_properties(test_crop_interop PROPERTIES SKIP_RETURN_CODE 77 LABELS interop TIMEOUT 300)

if(TARGET tower)
  add_test(NAME test_eco_cli
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_eco_cli.sh $<TARGET_FILE:tower>
            $<TARGET_FILE:test_imagefolder> $<TARGET_FILE:test_events> $<TARGET_FILE:test_safetensors>)
  set_tests_properties(test_eco_cli PROPERTIES SKIP_RETURN_CODE 77 LABELS train TIMEOUT 300)
  # An image folder as --data of train and eval, decoded in the input pipeline.
  add_test(NAME test_imagefolder_cli
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_imagefolder_cli.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_imagefolder>)
  set_tests_properties(test_imagefolder_cli PROPERTIES LABELS train TIMEOUT 300)
  add_test(NAME test_eco_interop
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/interop/run_eco_interop.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_imagefolder>)
  set_tests_properties(test_eco_interop PROPERTIES SKIP_RETURN_CODE 77 LABELS interop TIMEOUT 600)
endif()
