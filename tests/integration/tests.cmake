# tests/integration: a real feedd on a private socket, spoken to through
# libfeedclient (and raw packets), plus a check of what libfeedclient.so
# links and exports. Included from tests/CMakeLists.txt.
set(FEED_IT_DIR ${CMAKE_CURRENT_SOURCE_DIR}/integration)

add_library(feedd_harness STATIC ${FEED_IT_DIR}/feedd_harness.c)
target_include_directories(feedd_harness PUBLIC ${FEED_IT_DIR})
target_link_libraries(feedd_harness PUBLIC PkgConfig::CHECK feedclient feed_format feed_proto)

# feed_integration_test(<name> [<libs>...]): tests/integration/check_<name>.c
function(feed_integration_test name)
  add_executable(check_${name} ${FEED_IT_DIR}/check_${name}.c)
  target_link_libraries(check_${name} PRIVATE feedd_harness ${ARGN})
  add_dependencies(check_${name} feedd feedctl)
  add_test(NAME integration_${name} COMMAND check_${name})
  set_tests_properties(integration_${name} PROPERTIES ENVIRONMENT "${FEED_TEST_ENV}" TIMEOUT 900
                       LABELS integration)
endfunction()

feed_integration_test(protocol)
feed_integration_test(lifecycle)
feed_integration_test(refusals)
feed_integration_test(delivery PkgConfig::ZLIB)
feed_integration_test(isolation)
feed_integration_test(partition)
feed_integration_test(resume)
feed_integration_test(mixture_stream)
feed_integration_test(mixture_packed)
feed_integration_test(open)
feed_integration_test(client_nomem)
feed_integration_test(client_api)
pkg_check_modules(JSONC REQUIRED IMPORTED_TARGET json-c)
feed_integration_test(status PkgConfig::JSONC)
feed_integration_test(fair)
feed_integration_test(loop)  # the loop answers while an epoch of 2^24 blocks is laid out
feed_integration_test(systemd)
if(FEED_TEST_SEAMS)  # the watchdog test stalls a worker through a seam
  target_compile_definitions(check_systemd PRIVATE FEEDD_TEST_SEAMS)
endif()
feed_integration_test(reload)
feed_integration_test(remote_http)  # nginx and tests/remote/fault_proxy.py on loopback
target_compile_definitions(check_client_api PRIVATE API_PROJECT_VERSION="${PROJECT_VERSION}")

add_executable(check_client_elf ${FEED_IT_DIR}/check_client_elf.c)
target_link_libraries(check_client_elf PRIVATE PkgConfig::CHECK)
add_dependencies(check_client_elf feedclient feedd)
add_test(NAME integration_client_elf COMMAND check_client_elf)
set_tests_properties(integration_client_elf PROPERTIES ENVIRONMENT "${FEED_TEST_ENV}" TIMEOUT 60
                     LABELS integration)

# README.md's C example compiles against the public headers as written.
add_test(NAME integration_readme_example
  COMMAND ${CMAKE_COMMAND} -DREADME=${CMAKE_SOURCE_DIR}/README.md
          -DOUT=${CMAKE_CURRENT_BINARY_DIR}/readme_example.c -DCC=${CMAKE_C_COMPILER}
          -DINCLUDE=${CMAKE_SOURCE_DIR}/client/include
          -P ${FEED_IT_DIR}/check_readme_example.cmake)
set_tests_properties(integration_readme_example PROPERTIES TIMEOUT 60 LABELS integration)

# The GPU path against the test double of the driver (tests/gpu_double),
# which libfeedclient loads through FEED_CUDA_DRIVER when a test sets it.
add_library(fake_cuda SHARED ${CMAKE_CURRENT_SOURCE_DIR}/gpu_double/fake_cuda.c)
target_link_libraries(fake_cuda PRIVATE feed_kernels)
set_target_properties(fake_cuda PROPERTIES C_VISIBILITY_PRESET hidden)
feed_integration_test(client_gpu)
target_include_directories(check_client_gpu PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/gpu_double)
target_link_libraries(check_client_gpu PRIVATE feed_kernels ${CMAKE_DL_LIBS} m)
add_dependencies(check_client_gpu fake_cuda)
set_tests_properties(integration_client_gpu PROPERTIES ENVIRONMENT
  "${FEED_TEST_ENV};FEED_FAKE_CUDA=$<TARGET_FILE:fake_cuda>")

# nvJPEG's test double (decodes with core/image.h), which feedd loads
# through FEED_NVJPEG_LIBRARY (daemon/gpu/nvjpeg_load.h).
add_library(fake_nvjpeg SHARED ${CMAKE_CURRENT_SOURCE_DIR}/gpu_double/fake_nvjpeg.c)
target_link_libraries(fake_nvjpeg PRIVATE feed_core)
set_target_properties(fake_nvjpeg PROPERTIES C_VISIBILITY_PRESET hidden)
# hybrid JPEG decode in a stream with device slots, on both doubles
feed_integration_test(hybrid_stream feed_core feed_format)
add_dependencies(check_hybrid_stream fake_cuda fake_nvjpeg)
if(FEED_NVCC)   # kernels embedded: the double must be usable (no skip)
  target_compile_definitions(check_hybrid_stream PRIVATE FEED_TEST_FATBIN=1)
endif()
set_tests_properties(integration_hybrid_stream PROPERTIES FIXTURES_REQUIRED image_fixtures
  ENVIRONMENT
  "${FEED_TEST_ENV};FEED_FAKE_CUDA=$<TARGET_FILE:fake_cuda>;FEED_FAKE_NVJPEG=$<TARGET_FILE:fake_nvjpeg>")
# status says where JPEGs decode (check_status: test_status_jpeg_decode_says_where)
add_dependencies(check_status fake_cuda fake_nvjpeg)
set_tests_properties(integration_status PROPERTIES ENVIRONMENT
  "${FEED_TEST_ENV};FEED_FAKE_CUDA=$<TARGET_FILE:fake_cuda>;FEED_FAKE_NVJPEG=$<TARGET_FILE:fake_nvjpeg>")

# NVML's test double, which `feedctl top` loads through FEED_NVML_LIBRARY
# (tests/python/test_metrics.py sets it).
add_library(fake_nvml SHARED ${CMAKE_CURRENT_SOURCE_DIR}/gpu_double/fake_nvml.c)
set_target_properties(fake_nvml PROPERTIES C_VISIBILITY_PRESET hidden)

# The same on a real device (tests/gpu): built with CUDA, skipped (exit 77)
# where nvidia-smi lists no GPU. The test itself links cudart to allocate
# device memory; libfeedclient still loads the driver at run time.
if(FEED_CUDA)
  find_package(CUDAToolkit REQUIRED)
  add_executable(check_client_gpu_device ${CMAKE_CURRENT_SOURCE_DIR}/gpu/check_client_gpu_device.c)
  target_link_libraries(check_client_gpu_device PRIVATE feedd_harness CUDA::cudart)
  add_dependencies(check_client_gpu_device feedd feedctl)
  add_test(NAME gpu_client COMMAND check_client_gpu_device)
  set_tests_properties(gpu_client PROPERTIES ENVIRONMENT "${FEED_TEST_ENV}" TIMEOUT 300
                       SKIP_RETURN_CODE 77 LABELS gpu)
  add_executable(check_ipc_gpu ${CMAKE_CURRENT_SOURCE_DIR}/gpu/check_ipc_gpu.c)
  target_link_libraries(check_ipc_gpu PRIVATE feedd_harness CUDA::cudart)
  add_dependencies(check_ipc_gpu feedd feedctl)
  add_test(NAME gpu_ipc COMMAND check_ipc_gpu)
  set_tests_properties(gpu_ipc PROPERTIES ENVIRONMENT "${FEED_TEST_ENV}" TIMEOUT 300
                       SKIP_RETURN_CODE 77 LABELS gpu)
endif()

# Groups (DESIGN.md "Sharing between jobs"): identical batches built once,
# killed and stopped members, mismatches, late joiners, private writes.
feed_integration_test(groups)

# Encoded images through feedd: links core (aug_apply_img, the expected
# bytes) and reads the image fixtures.
feed_integration_test(images feed_core)
set_tests_properties(integration_images PROPERTIES FIXTURES_REQUIRED image_fixtures)

# CUDA IPC delivery between feedd and a client, both on the driver's test
# double (its device memory and interprocess events are shared memory).
feed_integration_test(ipc feed_kernels feed_format ${CMAKE_DL_LIBS})
target_include_directories(check_ipc PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/gpu_double)
add_dependencies(check_ipc fake_cuda)
set_tests_properties(integration_ipc PROPERTIES ENVIRONMENT
  "${FEED_TEST_ENV};FEED_FAKE_CUDA=$<TARGET_FILE:fake_cuda>")

# The shipped systemd units (deploy/): verify and security exposure, and
# every configs/*.yaml started under them as the unit's user (root only:
# it creates users). Skipped (77) where systemd's tools are absent.
foreach(part analyze user sandbox)
  add_test(NAME integration_systemd_unit_${part}
           COMMAND sh ${FEED_IT_DIR}/check_systemd_unit.sh ${part})
  set_tests_properties(integration_systemd_unit_${part} PROPERTIES
    ENVIRONMENT "${FEED_TEST_ENV}" TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS integration)
endforeach()
set_tests_properties(integration_systemd_unit_user PROPERTIES DEPENDS integration_systemd_unit_analyze)

# feedpack wds's worker threads, under every build (TSan's included).
add_test(NAME integration_wds COMMAND sh ${FEED_IT_DIR}/check_wds.sh ${CMAKE_BINARY_DIR}/bin
         ${FEED_IMAGES})
set_tests_properties(integration_wds PROPERTIES ENVIRONMENT "${FEED_TEST_ENV}" TIMEOUT 120
                     LABELS integration FIXTURES_REQUIRED image_fixtures)
