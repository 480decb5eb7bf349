# model/cuda.cmake — library tower_model_cuda: the CUDA layers and models
# (layers_cuda.h, model_cuda.h), built only when TOWER_HAVE_CUDA.  Included
# by model/CMakeLists.txt; tower/ (tower_cuda.c) links the library.  Paths
# are relative to this file.

# The root's -Wall -Wextra reach the host compiler of .cu files through the
# -forward-unknown-to-host-compiler that CMake gives nvcc.
add_library(tower_model_cuda STATIC
  ${CMAKE_CURRENT_LIST_DIR}/activations_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/batchnorm_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/blocks_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/conv2d_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/dense_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/depthwise_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/loss_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/lrn_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/model_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/pointwise_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/pool_cuda.cu)
target_include_directories(tower_model_cuda PUBLIC ${CMAKE_SOURCE_DIR} ${CUDNN_INCLUDE_DIR})
target_link_libraries(tower_model_cuda PUBLIC tower_model CUDA::cudart CUDA::cublas ${CUDNN_LIBRARY})
