# model/cuda.cmake — library tower_model_cuda: the CUDA layers and models
# (layers_cuda.h, model_cuda.h), built only when TOWER_HAVE_CUDA.  Included
# by model/CMakeLists.txt, or by tower/CMakeLists.txt when model/ has not
# included it; paths are relative to this file so either works.

# tower_cuda_compile_options(<target>): the root's add_compile_options
# (-Wall -Wextra, sanitizer flags) are gcc options that nvcc rejects.  Keep
# them for C sources; hand them to the host compiler (-Xcompiler) for CUDA
# sources.  Options with a comma (-fsanitize=address,undefined) cannot pass
# through -Xcompiler intact and are left out of CUDA compiles; -D options
# go to both as they are.
function(tower_cuda_compile_options target)
  get_target_property(opts ${target} COMPILE_OPTIONS)
  if(NOT opts)
    return()
  endif()
  set(fixed "")
  foreach(o IN LISTS opts)
    if(o MATCHES "^-D" OR o MATCHES "^\\$<")
      list(APPEND fixed "${o}")
    elseif(o MATCHES ",")
      list(APPEND fixed "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${o}>")
    else()
      list(APPEND fixed "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${o}>" "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${o}>")
    endif()
  endforeach()
  set_target_properties(${target} PROPERTIES COMPILE_OPTIONS "${fixed}")
endfunction()

add_library(tower_model_cuda STATIC
  ${CMAKE_CURRENT_LIST_DIR}/activations_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/conv2d_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/dense_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/loss_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/lrn_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/model_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/pool_cuda.cu)
target_include_directories(tower_model_cuda PUBLIC ${CMAKE_SOURCE_DIR} ${CUDNN_INCLUDE_DIR})
target_link_libraries(tower_model_cuda PUBLIC tower_model CUDA::cudart CUDA::cublas ${CUDNN_LIBRARY})
tower_cuda_compile_options(tower_model_cuda)
