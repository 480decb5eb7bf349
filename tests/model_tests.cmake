# model_tests.cmake — ctest registrations for model/ (CPU, fast: well under a minute).
tower_add_test(NAME test_layers_gradcheck
  SOURCES test_layers_gradcheck.c gradcheck.c
  LIBS tower_model)
tower_add_test(NAME test_layers_known
  SOURCES test_layers_known.c gradcheck.c
  LIBS tower_model)
tower_add_test(NAME test_conv_dnnl
  SOURCES test_conv_dnnl.c gradcheck.c
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
# The MobileNetV2 layers against Keras 3 and TensorFlow's gradients (label
# interop; skipped, 77, without TensorFlow: export TOWER_PYTHON).
add_executable(test_layers_keras_helper test_layers_keras_helper.c)
target_link_libraries(test_layers_keras_helper PRIVATE tower_model)
add_test(NAME test_layers_keras
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/interop/run_keras_layers.sh $<TARGET_FILE:test_layers_keras_helper>)
set_tests_properties(test_layers_keras PROPERTIES SKIP_RETURN_CODE 77 LABELS interop TIMEOUT 600)
# The layer graph against the hand-written plans it replaced (the oracle).
tower_add_test(NAME test_model_graph_oracle
  SOURCES test_model_graph_oracle.c model_reference.c gradcheck.c
  LIBS tower_model)
# mobilenet_v2 on the layer graph: Keras's table, whole-model gradients, evaluation mode.
tower_add_test(NAME test_model_mobilenet_v2
  SOURCES test_model_mobilenet_v2.c gradcheck.c
  LIBS tower_model)
# vgg11, vgg16, resnet20, resnet50 on the layer graph: Keras's tables, whole-model gradients.
tower_add_test(NAME test_model_nets
  SOURCES test_model_nets.c gradcheck.c
  LIBS tower_model)
# model_backward_write (a step's first micro-batch) against zeroing + model_backward, every network.
tower_add_test(NAME test_model_backward_write
  SOURCES test_model_backward_write.c gradcheck.c
  LIBS tower_model)
# vgg11, vgg16, resnet20, resnet50 against Keras (tf.keras.applications.VGG16
# and ResNet50; vgg11 and resnet20 built from Keras's layers) by name (label
# interop; skipped, 77, without TensorFlow: export TOWER_PYTHON).
add_executable(test_nets_keras_helper test_nets_keras_helper.c gradcheck.c)
target_link_libraries(test_nets_keras_helper PRIVATE tower_model m)
add_test(NAME test_model_nets_keras
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/interop/run_keras_nets.sh $<TARGET_FILE:test_nets_keras_helper>)
set_tests_properties(test_model_nets_keras PROPERTIES SKIP_RETURN_CODE 77 LABELS interop TIMEOUT 600)
# mobilenet_v2 against tf.keras.applications.MobileNetV2, through the same helper (label interop).
add_test(NAME test_model_mobilenet_keras
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/interop/run_keras_mobilenet.sh $<TARGET_FILE:test_nets_keras_helper>)
set_tests_properties(test_model_mobilenet_keras PROPERTIES SKIP_RETURN_CODE 77 LABELS interop TIMEOUT 600)
# The graph's fusion (graph_fuse: batch norm + ReLU6/ReLU, implicit padding) against the unfused plan,
# layer by layer, by finite differences, and on whole networks.
tower_add_test(NAME test_model_fuse
  SOURCES test_model_fuse.c gradcheck.c
  LIBS tower_model)
tower_add_test(NAME test_winograd
  SOURCES test_winograd.c gradcheck.c
  LIBS tower_model)
# Again with more OpenMP threads than its teams (1 and 2) on any machine: a team of one must not let a product
# inside it take the others (model/sgemm.c), or its bits would follow OMP_NUM_THREADS.
add_test(NAME test_winograd_omp4 COMMAND test_winograd)
set_tests_properties(test_winograd_omp4 PROPERTIES ENVIRONMENT OMP_NUM_THREADS=4)
# A first layer's direct convolution (conv_first.c) against the loops, at 8 and 16 lanes, 1 and 2 threads.
tower_add_test(NAME test_conv_first
  SOURCES test_conv_first.c gradcheck.c
  LIBS tower_model)
