# cmake/FeedInstall.cmake: what `cmake --install` puts where (GNUInstallDirs,
# DESTDIR honoured). Included last from the top CMakeLists.txt, when every
# target exists. Installs:
#   bin/        feedd, feedctl, feedpack, feedbench
#   lib/        libfeedclient.so.0 (+ the dev link), pkgconfig/feedclient.pc,
#               cmake/feedclient/ (find_package, target feedclient::feedclient)
#   include/    feed/*.h
#   share/      man pages, README (and LICENSE, if the tree has one)
#   lib/systemd/system, lib/sysusers.d, lib/tmpfiles.d: deploy/
#   /etc/feedd/feedd.yaml (prefix/etc unless the prefix is /usr)
#   the Python package feedclient, in the site directory of the prefix
# Paths that end up inside installed files (the unit's ExecStart, the
# config's place, the Python package's way to the library) depend on the
# prefix given at install time (`--prefix`, or cpack's /usr), not the one
# of the configure step: cmake/FeedInstallTime.cmake works them out then.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Only a release build is installed or packaged (CMakeLists.txt, "Two
# kinds of build"): a checked one's asserts, lock checks and FEEDD_TEST_*
# seams are the tests' and would reach a node or a trainer's process.
if(NOT FEED_KIND STREQUAL "release")
  install(CODE "message(FATAL_ERROR \"feedd: ${CMAKE_BINARY_DIR} is a ${FEED_KIND} build \"
    \"(asserts, lock checks, FEEDD_TEST_* seams): install or package a release build: \"
    \"cmake --build ${CMAKE_BINARY_DIR} --target feed_release, then cmake --install \"
    \"${CMAKE_BINARY_DIR}/release (or cmake -B DIR -DCMAKE_BUILD_TYPE=Release)\")")
endif()

# Every program and libfeedclient carry the kind they were built as, in a
# string the tests and client/python/setup.py look for
# ("feed-build-kind=release" or "=checked").
set(FEED_KIND_C ${CMAKE_BINARY_DIR}/generated/feed_build_kind.c)
file(CONFIGURE OUTPUT ${FEED_KIND_C} CONTENT
"/* Written by CMake (cmake/FeedInstall.cmake): the kind of this build. */
__attribute__((used)) static const char feed_build_kind[] = \"feed-build-kind=${FEED_KIND}\";
")
foreach(t feedd feedctl feedpack feedbench feedclient feedpack_lib)
  target_sources(${t} PRIVATE ${FEED_KIND_C})
endforeach()

# The release twin of a checked tree, in <build>/release: what is
# installed, packaged and put in the wheel (the tests of tests/install
# use it). Only the installed targets are built there.
if(FEED_KIND STREQUAL "checked" AND NOT FEED_SANITIZE AND NOT FEED_FUZZ)
  set(FEED_RELEASE_ARGS -DCMAKE_BUILD_TYPE=Release -DFEED_WITH_CUDA=${FEED_WITH_CUDA}
      -DFEED_PYTHON=${FEED_PYTHON})
  if(FEED_CUDA)
    list(APPEND FEED_RELEASE_ARGS -DCMAKE_CUDA_COMPILER=${CMAKE_CUDA_COMPILER}
         "-DCMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES}")
  endif()
  include(ProcessorCount)
  ProcessorCount(FEED_NPROC)
  add_custom_target(feed_release
    COMMAND ${CMAKE_COMMAND} -S ${CMAKE_SOURCE_DIR} -B ${CMAKE_BINARY_DIR}/release
            ${FEED_RELEASE_ARGS}
    COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR}/release --parallel ${FEED_NPROC}
            --target feedd feedctl feedpack feedbench feedclient feedpack_lib feed_man feed_changelog
    COMMENT "release build of the installed targets in ${CMAKE_BINARY_DIR}/release"
    VERBATIM)
endif()

set(FEED_INSTALL_PYTHONDIR "" CACHE STRING
  "site directory of the Python package, relative to the prefix (empty: worked out at install time)")

# feed_relpath(<var> <from> <to>): the relative path between two install
# directories (relative to the prefix, as GNUInstallDirs gives them).
function(feed_relpath var from to)
  file(RELATIVE_PATH rel /feed_prefix/${from} /feed_prefix/${to})
  if(rel STREQUAL "")
    set(rel .)
  endif()
  set(${var} ${rel} PARENT_SCOPE)
endfunction()

# Programs. feedctl and feedbench find libfeedclient beside them through a
# relative run path, so a prefix such as /opt/feedd works as it is moved.
feed_relpath(FEED_BIN_TO_LIB ${CMAKE_INSTALL_BINDIR} ${CMAKE_INSTALL_LIBDIR})
set_target_properties(feedctl feedbench PROPERTIES INSTALL_RPATH "$ORIGIN/${FEED_BIN_TO_LIB}")
install(TARGETS feedd feedctl feedpack feedbench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The library, its headers, and the CMake package around them.
install(TARGETS feedclient EXPORT feedclientTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# libfeedpack, the writer feedclient.pack binds (found beside libfeedclient).
install(TARGETS feedpack_lib LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_SKIP)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/client/include/feed
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
set(FEED_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/feedclient)
install(EXPORT feedclientTargets NAMESPACE feedclient:: DESTINATION ${FEED_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/feedclientConfig.cmake.in
  ${CMAKE_BINARY_DIR}/install/feedclientConfig.cmake INSTALL_DESTINATION ${FEED_CMAKEDIR})
# SONAME 0 is the ABI: any 0.x is compatible with any other.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/install/feedclientConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/install/feedclientConfig.cmake
  ${CMAKE_BINARY_DIR}/install/feedclientConfigVersion.cmake DESTINATION ${FEED_CMAKEDIR})

# feedclient.pc, its prefix relative to its own directory.
feed_relpath(FEED_PC_TO_PREFIX ${CMAKE_INSTALL_LIBDIR}/pkgconfig .)
configure_file(${CMAKE_CURRENT_LIST_DIR}/feedclient.pc.in
  ${CMAKE_BINARY_DIR}/install/feedclient.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/install/feedclient.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# Man pages, gzipped as Debian ships them (-n: no name or time inside, so
# the same page gives the same bytes), and documents.
set(FEED_MAN_GZ "")
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/man)
foreach(page feedd.8 feedctl.1 feedpack.1 feedbench.1 feedd.yaml.5)
  string(REGEX MATCH "[0-9]$" section ${page})
  set(gz ${CMAKE_BINARY_DIR}/man/${page}.gz)
  add_custom_command(OUTPUT ${gz}
    COMMAND sh -c "gzip -9nc < \"$1\" > \"$2\"" sh ${CMAKE_SOURCE_DIR}/man/${page} ${gz}
    DEPENDS ${CMAKE_SOURCE_DIR}/man/${page} VERBATIM)
  list(APPEND FEED_MAN_GZ ${gz})
  install(FILES ${gz} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
endforeach()
add_custom_target(feed_man ALL DEPENDS ${FEED_MAN_GZ})
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
if(EXISTS ${CMAKE_SOURCE_DIR}/LICENSE)
  install(FILES ${CMAKE_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})
endif()
# Debian's copyright file and the changelog of this (native) version.
set(FEED_DEB_MAINTAINER "feedd maintainers <maintainers@users.noreply.a-seed-a601d607.example>"
    CACHE STRING "the .deb's Maintainer: and changelog signature")
configure_file(${CMAKE_CURRENT_LIST_DIR}/deb/changelog.in ${CMAKE_BINARY_DIR}/install/changelog @ONLY)
set(FEED_CHANGELOG_GZ ${CMAKE_BINARY_DIR}/install/changelog.gz)
add_custom_command(OUTPUT ${FEED_CHANGELOG_GZ}
  COMMAND sh -c "gzip -9nc < \"$1\" > \"$2\"" sh ${CMAKE_BINARY_DIR}/install/changelog
          ${FEED_CHANGELOG_GZ}
  DEPENDS ${CMAKE_CURRENT_LIST_DIR}/deb/changelog.in VERBATIM)
add_custom_target(feed_changelog ALL DEPENDS ${FEED_CHANGELOG_GZ})
install(FILES ${CMAKE_CURRENT_LIST_DIR}/deb/copyright ${FEED_CHANGELOG_GZ}
  DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${CMAKE_CURRENT_LIST_DIR}/deb/lintian-overrides
  DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME feedd)

# systemd's snippets under the names systemd looks for.
install(FILES ${CMAKE_SOURCE_DIR}/deploy/feedd.sysusers
  DESTINATION lib/sysusers.d RENAME feedd.conf)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/feedd.tmpfiles
  DESTINATION lib/tmpfiles.d RENAME feedd.conf)

# The unit, the socket, the config and the Python package: at install time.
set(feed_fastiter "")
if(TARGET feedclient_fastiter)
  set(feed_fastiter "$<TARGET_FILE:feedclient_fastiter>")
endif()
install(CODE "
  set(FEED_I_FASTITER \"${feed_fastiter}\")
  set(FEED_I_STRIP \"${CMAKE_STRIP}\")
  set(FEED_I_SRC \"${CMAKE_SOURCE_DIR}\")
  set(FEED_I_WORK \"${CMAKE_BINARY_DIR}/install/at-install\")
  set(FEED_I_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(FEED_I_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(FEED_I_DOCDIR \"${CMAKE_INSTALL_DOCDIR}\")
  set(FEED_I_PYTHONDIR \"${FEED_INSTALL_PYTHONDIR}\")
  set(FEED_I_PYTHON \"${FEED_PYTHON}\")
")
install(SCRIPT ${CMAKE_CURRENT_LIST_DIR}/FeedInstallTime.cmake)
