# The CUDA backend's build (VLM_CUDA = AUTO | ON | OFF, VLM_CUDA_ARCHS).
# Sets VLM_HAVE_CUDA; vlm_cuda_libraries() then adds, when it is on:
#   vlm_cuda_kernels  kernels/cuda/**/*.{cu,cpp}  (CUDA runtime, cuBLASLt)
#   vlm_cuda_model    model/**/cuda/*.cpp          (the decoder on the GPU)
#   engine/cuda/*.cpp into vlm_engine, which then defines VLM_HAVE_CUDA=1 for its users.
set(VLM_HAVE_CUDA OFF)
string(TOUPPER "${VLM_CUDA}" _vlm_cuda)
if(NOT _vlm_cuda STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TARGET CUDA::cublasLt)
    set(VLM_HAVE_CUDA ON)
  elseif(_vlm_cuda STREQUAL "ON")
    message(FATAL_ERROR "VLM_CUDA=ON but nvcc or cuBLAS was not found (set CMAKE_CUDA_COMPILER, or VLM_CUDA=AUTO/OFF)")
  endif()
endif()

if(VLM_HAVE_CUDA)
  set(CMAKE_CUDA_ARCHITECTURES OFF)  # the -gencode flags below name them
  # .cu files are C++17: CMake 3.25 knows no C++20 flag for nvcc 13, and fmt's consteval format
  # strings (kernels/core/check.h) do not compile under nvcc's C++20.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  if(CCACHE_PROGRAM)
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  endif()
  set(VLM_CUDA_GENCODE "")
  foreach(arch ${VLM_CUDA_ARCHS})
    list(APPEND VLM_CUDA_GENCODE "-gencode=arch=compute_${arch},code=sm_${arch}")
  endforeach()
  message(STATUS "vlm: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, archs ${VLM_CUDA_ARCHS})")
else()
  message(STATUS "vlm: CUDA backend OFF (VLM_CUDA=${VLM_CUDA})")
endif()

function(vlm_cuda_libraries)
  if(NOT VLM_HAVE_CUDA)
    return()
  endif()
  set(cuda_opts $<$<COMPILE_LANGUAGE:CUDA>:${VLM_CUDA_GENCODE} --expt-relaxed-constexpr -lineinfo -Xcompiler=-fno-math-errno>)
  file(GLOB_RECURSE ksrcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cuda/*.cu ${CMAKE_SOURCE_DIR}/kernels/cuda/*.cpp)
  # The attention kernels take PagedKVLayer (kernels/attention/paged_kv.h, which reaches fmt through
  # VLM_CHECK); nvcc 13's host pass rejects fmt 9's constexpr code in C++20 mode, so they compile
  # as C++17, in an object library of their own (with the method kernels, which take it too).
  file(GLOB_RECURSE asrcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cuda/attention/*.cu
       ${CMAKE_SOURCE_DIR}/kernels/cuda/sink_router/*.cu ${CMAKE_SOURCE_DIR}/kernels/cuda/kv_compression/*.cu)
  list(REMOVE_ITEM ksrcs ${asrcs})
  add_library(vlm_cuda_attention OBJECT ${asrcs})
  set_target_properties(vlm_cuda_attention PROPERTIES CUDA_STANDARD 17)
  target_include_directories(vlm_cuda_attention PUBLIC ${CMAKE_SOURCE_DIR})
  target_link_libraries(vlm_cuda_attention PUBLIC vlm_kernels CUDA::cudart)
  target_compile_options(vlm_cuda_attention PRIVATE ${cuda_opts})
  add_library(vlm_cuda_kernels STATIC ${ksrcs} $<TARGET_OBJECTS:vlm_cuda_attention>)
  target_include_directories(vlm_cuda_kernels PUBLIC ${CMAKE_SOURCE_DIR})
  target_link_libraries(vlm_cuda_kernels PUBLIC vlm_kernels CUDA::cudart CUDA::cublasLt ${CMAKE_DL_LIBS})  # dl: cuDNN is dlopened (cudnn_library.h)
  target_compile_options(vlm_cuda_kernels PRIVATE ${cuda_opts})
  target_compile_definitions(vlm_cuda_kernels PUBLIC VLM_HAVE_CUDA=1)

  file(GLOB_RECURSE msrcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/model/*/cuda/*.cpp)
  add_library(vlm_cuda_model STATIC ${msrcs})
  target_link_libraries(vlm_cuda_model PUBLIC vlm_model vlm_cuda_kernels)

  file(GLOB_RECURSE esrcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/engine/cuda/*.cpp)
  target_sources(vlm_engine PRIVATE ${esrcs})
  target_link_libraries(vlm_engine PUBLIC vlm_cuda_model)
endfunction()
