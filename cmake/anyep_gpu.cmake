# anyep/cmake/anyep_gpu.cmake — which GPU toolchain compiles the device code: CUDA (nvcc), HIP
# (ROCm clang, AMD GPUs) or none. Included once by the root CMakeLists.txt, after project().
#
# In:  ANYEP_GPU (cache): auto | cuda | hip | none. auto: CUDA where nvcc is found, HIP where only
#      hipcc is, none otherwise. The older ANYEP_CUDA=ON/OFF still works: with ANYEP_GPU=auto it
#      picks cuda/none, and it must agree with an explicit ANYEP_GPU.
# Out: ANYEP_GPU_KIND (cuda | hip | none), ANYEP_HAVE_GPU, ANYEP_CUDA and ANYEP_HIP (ON/OFF),
#      ANYEP_GPU_LANG (CUDA | HIP), the interface target anyep_gpu_runtime (the runtime library
#      plus ANYEP_GPU_CUDA=1 or ANYEP_GPU_HIP=1, which src/common/gpu_runtime.h keys on) and
#      anyep_gpu_sources(<target> <files>...), which adds .cu files compiled by the chosen language.
include_guard(GLOBAL)
include(CheckLanguage)

set(ANYEP_GPU "auto" CACHE STRING "GPU toolchain for the kernels: auto, cuda, hip or none")
set_property(CACHE ANYEP_GPU PROPERTY STRINGS auto cuda hip none)
if(NOT ANYEP_GPU MATCHES "^(auto|cuda|hip|none)$")
  message(FATAL_ERROR "ANYEP_GPU must be auto, cuda, hip or none (got '${ANYEP_GPU}')")
endif()

# ANYEP_CUDA is read only when the user set it (it is never written to the cache here).
if(ANYEP_GPU STREQUAL "auto")
  if(DEFINED CACHE{ANYEP_CUDA})
    if(ANYEP_CUDA)
      set(ANYEP_GPU_KIND cuda)
    else()
      set(ANYEP_GPU_KIND none)
    endif()
  else()
    check_language(CUDA)
    find_program(ANYEP_HIPCC hipcc)
    mark_as_advanced(ANYEP_HIPCC)
    if(CMAKE_CUDA_COMPILER)
      set(ANYEP_GPU_KIND cuda)
    elseif(ANYEP_HIPCC)
      set(ANYEP_GPU_KIND hip)
    else()
      set(ANYEP_GPU_KIND none)
    endif()
  endif()
else()
  set(ANYEP_GPU_KIND ${ANYEP_GPU})
  if(DEFINED CACHE{ANYEP_CUDA})
    if((ANYEP_CUDA AND NOT ANYEP_GPU STREQUAL "cuda") OR (NOT ANYEP_CUDA AND ANYEP_GPU STREQUAL "cuda"))
      message(FATAL_ERROR "ANYEP_CUDA=${ANYEP_CUDA} contradicts ANYEP_GPU=${ANYEP_GPU}: drop ANYEP_CUDA "
                          "(-UANYEP_CUDA; ANYEP_GPU=cuda|hip|none replaces it)")
    endif()
  endif()
endif()

set(ANYEP_CUDA OFF)
set(ANYEP_HIP OFF)
set(ANYEP_HAVE_GPU OFF)
set(ANYEP_GPU_LANG "")
add_library(anyep_gpu_runtime INTERFACE)

if(ANYEP_GPU_KIND STREQUAL "cuda")
  set(ANYEP_CUDA ON)
  set(ANYEP_HAVE_GPU ON)
  set(ANYEP_GPU_LANG CUDA)
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    # Hopper is what the device machines have; override with -DCMAKE_CUDA_ARCHITECTURES=...
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
  # C++17 for device code: CMake 3.25 (Debian 12, CI) does not know that nvcc accepts -std=c++20.
  # Headers shared with kernels (src/common, src/channel, src/kernels/*_layout.h) stay C++17.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  # One CUDA runtime for everything (the channel links the shared CUDA::cudart).
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  find_package(CUDAToolkit REQUIRED)
  target_link_libraries(anyep_gpu_runtime INTERFACE CUDA::cudart)
  target_compile_definitions(anyep_gpu_runtime INTERFACE ANYEP_GPU_CUDA=1)
elseif(ANYEP_GPU_KIND STREQUAL "hip")
  set(ANYEP_HIP ON)
  set(ANYEP_HAVE_GPU ON)
  set(ANYEP_GPU_LANG HIP)
  # One warp size in every file of the build, also plain C++ that never sees HIP (the HT geometry
  # in anyep_runtime_contract is computed from it and must match the kernels'): CDNA's 64.
  add_compile_definitions(ANYEP_WARP_SIZE=64)
  include(${CMAKE_CURRENT_LIST_DIR}/anyep_hip_toolchain.cmake)
  anyep_prepare_hip()
  enable_language(HIP)
  set(CMAKE_HIP_STANDARD 17)  # same as CUDA: the headers shared with kernels stay C++17
  set(CMAKE_HIP_STANDARD_REQUIRED ON)
  set(CMAKE_HIP_EXTENSIONS OFF)
  # hip::host: the runtime library and __HIP_PLATFORM_AMD__ for host code compiled by the C++ compiler.
  find_package(hip CONFIG REQUIRED)
  target_link_libraries(anyep_gpu_runtime INTERFACE hip::host)
  target_compile_definitions(anyep_gpu_runtime INTERFACE ANYEP_GPU_HIP=1)
  # hipError_t is [[nodiscard]] (CUDA's cudaError_t is not): the code, written once for both,
  # ignores the result of cleanup calls (cudaFree in destructors) and of cudaGetLastError() that
  # only clears the error, as CUDA code does.
  target_compile_options(anyep_gpu_runtime INTERFACE $<$<COMPILE_LANGUAGE:CXX,HIP>:-Wno-unused-result>)
  # Programs with HIP objects link through clang, which notes that --offload-arch is unused there.
  target_link_options(anyep_gpu_runtime INTERFACE $<$<LINK_LANGUAGE:HIP>:-Wno-unused-command-line-argument>)
endif()

# anyep_gpu_sources(<target> <file>...): device sources (.cu) of <target>, compiled by CUDA or HIP.
# The same .cu files serve both: no per-vendor copies. Call it in the directory that defines <target>.
function(anyep_gpu_sources target)
  if(NOT ANYEP_HAVE_GPU)
    message(FATAL_ERROR "anyep_gpu_sources(${target}): no GPU toolchain (ANYEP_GPU_KIND=${ANYEP_GPU_KIND})")
  endif()
  target_sources(${target} PRIVATE ${ARGN})
  set_source_files_properties(${ARGN} PROPERTIES LANGUAGE ${ANYEP_GPU_LANG})
endfunction()
