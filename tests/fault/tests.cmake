# tests/fault: feedd under injected faults. fault_shim is an LD_PRELOAD
# library (for tests only, never installed) that fails a chosen allocation
# of a chosen request on feedd's loop (the FEED_TEST_SEAMS marks,
# daemon/policy/fault_seam.h) and cuts short or fails shard reads;
# check_fault drives it. Included from tests/CMakeLists.txt.
set(FEED_FAULT_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fault)

# Never instrumented: in a sanitizer build it sits in front of the
# sanitizer's runtime and forwards every call to it (fault_shim.c).
add_library(fault_shim SHARED ${FEED_FAULT_DIR}/fault_shim.c)
target_compile_options(fault_shim PRIVATE -fno-sanitize=all)
target_link_options(fault_shim PRIVATE -fno-sanitize=all)
target_link_libraries(fault_shim PRIVATE ${CMAKE_DL_LIBS})

find_package(Threads REQUIRED)  # the group test reads a member on a thread
add_executable(check_fault ${FEED_FAULT_DIR}/check_fault.c)
target_include_directories(check_fault PRIVATE ${FEED_FAULT_DIR})
target_link_libraries(check_fault PRIVATE feedd_harness Threads::Threads)
add_dependencies(check_fault feedd fault_shim)
if(FEED_TEST_SEAMS)  # without the seams feedd marks no request: skipped
  target_compile_definitions(check_fault PRIVATE FEEDD_TEST_SEAMS)
endif()
add_test(NAME integration_fault COMMAND check_fault)
set_tests_properties(integration_fault PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
  LABELS integration ENVIRONMENT "${FEED_TEST_ENV};FEED_FAULT_SHIM=$<TARGET_FILE:fault_shim>")
