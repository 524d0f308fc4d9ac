# Sanitizer and fuzzing builds (docs/testing.md), both OFF by default, both CPU only.
#   LEANTRAIN_SANITIZE=ON  the library, the CLI and the tests with AddressSanitizer (leaks included)
#                          and UndefinedBehaviorSanitizer, any error fatal; gcc or clang.
#   LEANTRAIN_FUZZ=ON      also the libFuzzer harnesses of tests/fuzz/harnesses.txt, as
#                          <build>/fuzz/<name>; needs clang (CXX=clang++). The library's own code then
#                          also carries libFuzzer's coverage instrumentation, so one build serves both.
option(LEANTRAIN_SANITIZE "Build with AddressSanitizer + UndefinedBehaviorSanitizer" OFF)
option(LEANTRAIN_FUZZ "Build the libFuzzer harnesses of tests/fuzz (clang; implies the sanitizers)" OFF)
if(NOT LEANTRAIN_SANITIZE AND NOT LEANTRAIN_FUZZ)
  return()
endif()
if(LT_HAVE_CUDA)
  message(FATAL_ERROR "LEANTRAIN_SANITIZE and LEANTRAIN_FUZZ build the CPU code only: add -DLEANTRAIN_CUDA=OFF")
endif()
if(LEANTRAIN_FUZZ AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "LEANTRAIN_FUZZ needs clang (libFuzzer): configure a fresh build directory with "
                      "-DCMAKE_CXX_COMPILER=clang++ (Debian: apt-get install clang libclang-rt-14-dev)")
endif()

set(LT_SANITIZERS -fsanitize=address,undefined)
# Frame pointers and line tables make the reports' stacks readable (file:line is all a report
# prints; full -g would add variable and type info that only a debugger reads, and make every
# object larger and every link slower: clang's -gline-tables-only, GCC's -g1).
set(LT_SANITIZE_COMPILE ${LT_SANITIZERS} -fno-sanitize-recover=undefined -fno-omit-frame-pointer
    $<IF:$<CXX_COMPILER_ID:Clang>,-gline-tables-only,-g1>)
# -O1 instead of the build type's -O3: sanitized code is for finding bugs, and it compiles about
# twice as fast. Set for the whole directory (every target: CLI, tools, harnesses), so that a
# target may choose its own level after it: the unit tests' own code takes LEANTRAIN_TEST_OPT
# (CMakeLists.txt; scripts/sanitize.sh passes it), which -O1 passed down from the library would
# otherwise override.
set(CMAKE_CXX_FLAGS_RELEASE "-O1 -DNDEBUG")
target_compile_options(leantrain_core PRIVATE -O1)
# PUBLIC: every executable linking the library (CLI, tests, tools, harnesses) gets the same flags.
target_compile_options(leantrain_core PUBLIC ${LT_SANITIZE_COMPILE})
# libFuzzer's coverage instrumentation on the library's code only, which is what the harnesses
# explore (they get -fsanitize=fuzzer themselves below): not on the unit tests' or the CLI's own
# code, where it would cost about a sixth more compile time and slow every test for nothing.
if(LEANTRAIN_FUZZ)
  target_compile_options(leantrain_core PRIVATE -fsanitize=fuzzer-no-link)
endif()
target_link_options(leantrain_core PUBLIC ${LT_SANITIZERS})
message(STATUS "leantrain: sanitizers ON (${LT_SANITIZE_COMPILE})")

if(LEANTRAIN_FUZZ)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/fuzz/harnesses.txt)
  file(STRINGS ${PROJECT_SOURCE_DIR}/tests/fuzz/harnesses.txt LT_FUZZ_LINES REGEX "^[a-z]")
  set(LT_FUZZ_TARGETS)
  foreach(line ${LT_FUZZ_LINES})
    string(REGEX MATCH "^[a-z0-9_]+" name "${line}")
    add_executable(fuzz_${name} tests/fuzz/${name}.cpp)
    target_include_directories(fuzz_${name} PRIVATE src tests/fuzz)
    target_link_libraries(fuzz_${name} PRIVATE leantrain_core)
    target_compile_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
    set_target_properties(fuzz_${name} PROPERTIES OUTPUT_NAME ${name} RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
    list(APPEND LT_FUZZ_TARGETS fuzz_${name})
  endforeach()
  add_custom_target(fuzzers DEPENDS ${LT_FUZZ_TARGETS})
endif()
