# tests/install: the installed tree, the Debian package and the Python
# wheel, used as a node and a user would (issue 19, "Install and
# packages"; issue 28, "Release and checked builds"). Included from
# tests/CMakeLists.txt. The two that run cmake --install (directly or
# through cpack) share a lock: both write the build tree's install/
# scratch files. Not in sanitizer builds: what
# gets installed and packaged is the plain build, and an instrumented
# libfeedclient cannot load into a plain consumer or CPython.
if(FEED_SANITIZE)
  return()
endif()
set(FEED_INSTALL_DIR ${CMAKE_CURRENT_SOURCE_DIR}/install)

# What is installed, packaged and put in the wheel is a release build
# (CMakeLists.txt, "Two kinds of build"); this checked tree makes its
# release twin in release/ first (the feed_release target), and the three
# tests below use that. A release tree has no twin: it is tested itself.
# (The condition is cmake/FeedInstall.cmake's for the target, included
# after this file.)
if(FEED_KIND STREQUAL "checked" AND NOT FEED_FUZZ)
  set(FEED_RELEASE_DIR ${CMAKE_BINARY_DIR}/release)
  add_test(NAME install_release_build
    COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target feed_release)
  set_tests_properties(install_release_build PROPERTIES TIMEOUT 1500 LABELS integration
    FIXTURES_SETUP feed_release RESOURCE_LOCK feed_install_tree)
else()
  set(FEED_RELEASE_DIR ${CMAKE_BINARY_DIR})
endif()

add_test(NAME integration_install
  COMMAND bash ${FEED_INSTALL_DIR}/check_install.sh ${CMAKE_SOURCE_DIR} ${FEED_RELEASE_DIR}
          ${CMAKE_BINARY_DIR})
set_tests_properties(integration_install PROPERTIES
  ENVIRONMENT "${FEED_TEST_ENV};CC=${CMAKE_C_COMPILER}" TIMEOUT 240 LABELS integration
  RESOURCE_LOCK feed_install_tree FIXTURES_REQUIRED feed_release)

add_test(NAME integration_deb
  COMMAND bash ${FEED_INSTALL_DIR}/check_deb.sh ${FEED_RELEASE_DIR} ${PROJECT_VERSION})
set_tests_properties(integration_deb PROPERTIES ENVIRONMENT "${FEED_TEST_ENV}" TIMEOUT 300
  LABELS integration RESOURCE_LOCK feed_install_tree FIXTURES_REQUIRED feed_release)

add_test(NAME python_wheel COMMAND ${FEED_PYTEST} ${FEED_INSTALL_DIR}/test_install_wheel.py)
set_tests_properties(python_wheel PROPERTIES
  ENVIRONMENT "${FEED_TEST_ENV};FEED_VERSION=${PROJECT_VERSION};FEED_RELEASE_LIB=${FEED_RELEASE_DIR}/lib"
  TIMEOUT 120 LABELS python FIXTURES_REQUIRED feed_release)

# The man pages name every flag, command and config key there is.
add_test(NAME integration_man
  COMMAND bash ${FEED_INSTALL_DIR}/check_man.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(integration_man PROPERTIES TIMEOUT 60 LABELS integration)
