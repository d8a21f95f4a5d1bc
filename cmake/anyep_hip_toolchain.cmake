# anyep/cmake/anyep_hip_toolchain.cmake — settings CMake's HIP language needs before
# enable_language(HIP), for AMD's own ROCm layout (/opt/rocm: nothing to do) and for distribution
# packages that split ROCm over the multiarch tree (Debian 12's hipcc + libamdhip64-dev, ROCm 5.2),
# where CMake 3.25 cannot find it alone:
#  - the compiler: hipcc's clang (Debian: clang++-15), not whatever clang++ is first on PATH (the
#    device libraries are bitcode of one LLVM version);
#  - the device libraries: clang looks for <rocm>/amdgcn/bitcode; Debian has them under
#    <rocm>/lib/<multiarch>/amdgcn/bitcode;
#  - hip-lang-config.cmake: CMake looks only in <rocm>/lib/cmake/hip-lang; Debian has it under
#    lib/<multiarch>/cmake. A ROCm root of links in the build tree points there, and the HIP test
#    projects get CMAKE_LIBRARY_ARCHITECTURE so hip-lang finds its own dependencies (amd_comgr).
# Everything set here is an ordinary cache variable that a user may set instead
# (CMAKE_HIP_COMPILER, CMAKE_HIP_FLAGS, CMAKE_HIP_COMPILER_ROCM_ROOT, CMAKE_HIP_ARCHITECTURES).
include_guard(GLOBAL)

macro(anyep_prepare_hip)
  # Targets: MI200 (gfx90a) unless told otherwise (a list: -DCMAKE_HIP_ARCHITECTURES="gfx90a;gfx942").
  # Set before enable_language: CMake would otherwise ask rocm_agent_enumerator, which needs a GPU.
  if(NOT CMAKE_HIP_ARCHITECTURES)
    set(CMAKE_HIP_ARCHITECTURES gfx90a CACHE STRING "AMD GPU targets (gfx names) the HIP build compiles for")
  endif()

  find_program(ANYEP_HIPCONFIG hipconfig HINTS $ENV{ROCM_PATH}/bin /opt/rocm/bin)
  mark_as_advanced(ANYEP_HIPCONFIG)
  set(_anyep_rocm "")
  if(CMAKE_HIP_COMPILER_ROCM_ROOT)
    set(_anyep_rocm "${CMAKE_HIP_COMPILER_ROCM_ROOT}")
  elseif(ANYEP_HIPCONFIG)
    execute_process(COMMAND ${ANYEP_HIPCONFIG} --rocmpath OUTPUT_VARIABLE _anyep_rocm
                    OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _anyep_rc)
    if(NOT _anyep_rc EQUAL 0)
      set(_anyep_rocm "")
    endif()
  endif()
  if(NOT _anyep_rocm)
    message(FATAL_ERROR "ANYEP_GPU=hip: no ROCm found (no hipconfig on PATH, in $ROCM_PATH/bin or /opt/rocm/bin); "
                        "install ROCm (Debian: hipcc libamdhip64-dev) or set CMAKE_HIP_COMPILER_ROCM_ROOT")
  endif()
  set(_anyep_arch_dir "${_anyep_rocm}/lib/${CMAKE_LIBRARY_ARCHITECTURE}")

  # The compiler: the clang whose version hipcc's include path names (lib/clang/<major>.x.y).
  if(NOT CMAKE_HIP_COMPILER AND "$ENV{HIPCXX}" STREQUAL "" AND ANYEP_HIPCONFIG)
    execute_process(COMMAND ${ANYEP_HIPCONFIG} --hipclangpath OUTPUT_VARIABLE _anyep_clang_dir
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    execute_process(COMMAND ${ANYEP_HIPCONFIG} --cpp_config OUTPUT_VARIABLE _anyep_cpp_config
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    set(_anyep_names clang++)
    if(_anyep_cpp_config MATCHES "/clang/([0-9]+)\\.")
      set(_anyep_names clang++-${CMAKE_MATCH_1} clang++)
    endif()
    find_program(ANYEP_HIP_CLANG NAMES ${_anyep_names} HINTS "${_anyep_clang_dir}" NO_CACHE)
    if(ANYEP_HIP_CLANG)
      set(CMAKE_HIP_COMPILER "${ANYEP_HIP_CLANG}" CACHE FILEPATH "HIP compiler (ROCm's clang)")
    endif()
  endif()

  # The device libraries, where clang does not look by itself.
  if(NOT EXISTS "${_anyep_rocm}/amdgcn/bitcode" AND EXISTS "${_anyep_arch_dir}/amdgcn/bitcode"
     AND NOT CMAKE_HIP_FLAGS MATCHES "--rocm-device-lib-path")
    set(CMAKE_HIP_FLAGS "--rocm-path=${_anyep_rocm} --rocm-device-lib-path=${_anyep_arch_dir}/amdgcn/bitcode ${CMAKE_HIP_FLAGS}"
        CACHE STRING "Flags used by the HIP compiler" FORCE)
  endif()

  # hip-lang-config.cmake outside <rocm>/lib/cmake: a ROCm root of links in the build tree.
  if(NOT CMAKE_HIP_COMPILER_ROCM_ROOT AND NOT EXISTS "${_anyep_rocm}/lib/cmake/hip-lang/hip-lang-config.cmake"
     AND EXISTS "${_anyep_arch_dir}/cmake/hip-lang/hip-lang-config.cmake")
    set(_anyep_root "${CMAKE_BINARY_DIR}/anyep-rocm-root")
    file(MAKE_DIRECTORY "${_anyep_root}/lib/cmake")
    if(NOT EXISTS "${_anyep_root}/lib/cmake/hip-lang")
      file(CREATE_LINK "${_anyep_arch_dir}/cmake/hip-lang" "${_anyep_root}/lib/cmake/hip-lang" SYMBOLIC)
    endif()
    # hip-lang-config.cmake resolves the link, so everything else it finds is the real /usr tree.
    set(CMAKE_HIP_COMPILER_ROCM_ROOT "${_anyep_root}" CACHE PATH "ROCm root holding lib/cmake/hip-lang")
  endif()
  # HIP's test projects enable HIP alone, so they do not know the multiarch directory by themselves.
  list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES CMAKE_LIBRARY_ARCHITECTURE)
endmacro()
