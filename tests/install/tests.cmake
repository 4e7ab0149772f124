# tests/install: the installed tree, the Debian package and the Python
# wheel, used as a node and a user would (issue 19, "Install and
# packages"). Included from tests/CMakeLists.txt. The two that run
# cmake --install (directly or through cpack) share a lock: both write
# the build tree's install/ scratch files. Not in sanitizer builds: what
# gets installed and packaged is the plain build, and an instrumented
# libfeedclient cannot load into a plain consumer or CPython.
if(FEED_SANITIZE)
  return()
endif()
set(FEED_INSTALL_DIR ${CMAKE_CURRENT_SOURCE_DIR}/install)

add_test(NAME integration_install
  COMMAND bash ${FEED_INSTALL_DIR}/check_install.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
set_tests_properties(integration_install PROPERTIES
  ENVIRONMENT "${FEED_TEST_ENV};CC=${CMAKE_C_COMPILER}" TIMEOUT 120 LABELS integration
  RESOURCE_LOCK feed_install_tree)

add_test(NAME integration_deb
  COMMAND bash ${FEED_INSTALL_DIR}/check_deb.sh ${CMAKE_BINARY_DIR} ${PROJECT_VERSION})
set_tests_properties(integration_deb PROPERTIES ENVIRONMENT "${FEED_TEST_ENV}" TIMEOUT 120
  LABELS integration RESOURCE_LOCK feed_install_tree)

add_test(NAME python_wheel COMMAND ${FEED_PYTEST} ${FEED_INSTALL_DIR}/test_install_wheel.py)
set_tests_properties(python_wheel PROPERTIES
  ENVIRONMENT "${FEED_TEST_ENV};FEED_VERSION=${PROJECT_VERSION}" TIMEOUT 120 LABELS python)

# The man pages name every flag, command and config key there is.
add_test(NAME integration_man
  COMMAND bash ${FEED_INSTALL_DIR}/check_man.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(integration_man PROPERTIES TIMEOUT 60 LABELS integration)
