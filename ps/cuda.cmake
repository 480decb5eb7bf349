# ps/cuda.cmake — library tower_ps_cuda: the parameter server's state and
# arithmetic on GPUs (ps_gpu.cu: the modes ps_gpu and replicated_nccl) and,
# when NCCL is found, the NCCL all-reduce of replicated_nccl
# (allreduce_nccl.cu).  Built only when TOWER_HAVE_CUDA; included by
# ps/CMakeLists.txt.  NCCL is looked for as cuDNN is: nccl.h and libnccl in
# the CUDA toolkit, or under -DNCCL_ROOT=...; TOWER_NCCL=OFF leaves it out
# (then --all_reduce nccl is a one-line error).
set(TOWER_NCCL "AUTO" CACHE STRING "NCCL for --all_reduce nccl (CUDA builds): AUTO (when nccl.h and libnccl are found), ON or OFF")
set_property(CACHE TOWER_NCCL PROPERTY STRINGS AUTO ON OFF)
set(TOWER_HAVE_NCCL OFF)
if(NOT TOWER_NCCL STREQUAL "OFF")
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} ${NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
  # The versioned name too: the nvidia-nccl pip wheels ship libnccl.so.2 and no libnccl.so;
  # NAMES_PER_DIR: the directories in order (NCCL_ROOT first), every name in each.
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
               HINTS ${NCCL_ROOT} ${NCCL_ROOT}/lib ${NCCL_ROOT}/lib64 ${CUDAToolkit_LIBRARY_DIR})
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(TOWER_HAVE_NCCL ON)
  elseif(TOWER_NCCL STREQUAL "ON")
    message(FATAL_ERROR "TOWER_NCCL=ON but nccl.h or libnccl was not found (nccl.h: '${NCCL_INCLUDE_DIR}', "
                        "libnccl: '${NCCL_LIBRARY}'; hint: -DNCCL_ROOT=...)")
  endif()
endif()
message(STATUS "Tower: NCCL ${TOWER_HAVE_NCCL} (${NCCL_LIBRARY})")

add_library(tower_ps_cuda STATIC ${CMAKE_CURRENT_LIST_DIR}/ps_gpu.cu)
target_link_libraries(tower_ps_cuda PUBLIC tower_ps CUDA::cudart)
if(TOWER_HAVE_NCCL)
  target_sources(tower_ps_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/allreduce_nccl.cu)
  target_include_directories(tower_ps_cuda PUBLIC ${NCCL_INCLUDE_DIR})
  target_link_libraries(tower_ps_cuda PUBLIC ${NCCL_LIBRARY} Threads::Threads)
  target_compile_definitions(tower_ps_cuda PUBLIC TOWER_HAVE_NCCL=1)
endif()
