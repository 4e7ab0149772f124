# cmake/FeedInstallTime.cmake: the part of `cmake --install` that depends
# on the prefix in effect at install time (CMAKE_INSTALL_PREFIX as given by
# --prefix or by cpack), run from cmake_install.cmake after the FEED_I_*
# variables are set (cmake/FeedInstall.cmake). It writes the files it
# rewrites under FEED_I_WORK (the build tree), never the source tree, and
# installs with file(INSTALL), which adds DESTDIR and records the manifest.
#
#   unit and socket   deploy/feedd.{service,socket} with the paths of this
#                     prefix: <prefix>/<bindir>/feedd, the config directory;
#                     deploy/feedd-network.conf (a drop-in, off until
#                     copied) in <docdir>/examples
#   config            /etc/feedd/feedd.yaml when the prefix is /usr (as
#                     GNUInstallDirs does), else <prefix>/etc/feedd
#   Python package    feedclient/*.py in the prefix's site directory, with
#                     _installed.py saying where the library is from there,
#                     and _fastiter.abi3.so when it was built

set(prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" prefix "${prefix}")
if(prefix STREQUAL "/usr" OR prefix STREQUAL "")
  set(etc /etc)
elseif(prefix MATCHES "^/opt/(.*)")
  set(etc "/etc/opt/${CMAKE_MATCH_1}")
else()
  set(etc "${prefix}/etc")
endif()

# feed_i_abs(<var> <dir>): <dir> under the prefix unless already absolute.
macro(feed_i_abs var dir)
  if(IS_ABSOLUTE "${dir}")
    set(${var} "${dir}")
  else()
    set(${var} "${prefix}/${dir}")
  endif()
endmacro()
feed_i_abs(bindir "${FEED_I_BINDIR}")
feed_i_abs(libdir "${FEED_I_LIBDIR}")
feed_i_abs(docdir "${FEED_I_DOCDIR}")

# The unit and the socket, as written in deploy/ for /usr/local/bin and
# /etc/feedd, moved to this prefix's places.
file(MAKE_DIRECTORY "${FEED_I_WORK}")
foreach(unit feedd.service feedd.socket feedd-network.conf)
  set(src "${FEED_I_SRC}/deploy/${unit}")
  if(NOT EXISTS "${src}")
    continue()
  endif()
  file(READ "${src}" text)
  string(REPLACE "/usr/local/bin/" "${bindir}/" text "${text}")
  string(REPLACE "/usr/local/share/doc/feedd" "${docdir}" text "${text}")
  if(NOT etc STREQUAL "/etc")
    string(REPLACE "/etc/feedd/" "${etc}/feedd/" text "${text}")
  endif()
  file(WRITE "${FEED_I_WORK}/${unit}" "${text}")
  if(unit STREQUAL "feedd-network.conf")
    set(dest "${docdir}/examples")  # a drop-in the administrator enables
  else()
    set(dest "${prefix}/lib/systemd/system")
  endif()
  file(INSTALL DESTINATION "${dest}" TYPE FILE
       PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
       FILES "${FEED_I_WORK}/${unit}")
endforeach()

# The default config (a conffile in the Debian package).
if(etc STREQUAL "/etc")
  list(APPEND CMAKE_ABSOLUTE_DESTINATION_FILES "/etc/feedd/feedd.yaml")
endif()
file(INSTALL DESTINATION "${etc}/feedd" TYPE FILE
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
     FILES "${FEED_I_SRC}/configs/feedd.yaml")

# The Python package: Debian's python3 reads <prefix>/lib/python3/dist-packages
# for /usr and lib/python3.X/dist-packages elsewhere; other systems
# lib/python3.X/site-packages. FEED_INSTALL_PYTHONDIR overrides.
set(pydir "${FEED_I_PYTHONDIR}")
if(pydir STREQUAL "")
  execute_process(COMMAND "${FEED_I_PYTHON}" -c
                  "import sys; print('%d.%d' % sys.version_info[:2])"
                  OUTPUT_VARIABLE pyver OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR pyver STREQUAL "")
    message(FATAL_ERROR "feedclient: '${FEED_I_PYTHON}' does not run; set "
                        "FEED_INSTALL_PYTHONDIR (relative to the prefix) or FEED_PYTHON")
  endif()
  if(EXISTS /etc/debian_version AND prefix STREQUAL "/usr")
    set(pydir lib/python3/dist-packages)
  elseif(EXISTS /etc/debian_version)
    set(pydir lib/python${pyver}/dist-packages)
  else()
    set(pydir lib/python${pyver}/site-packages)
  endif()
endif()
feed_i_abs(pkgdir "${pydir}/feedclient")
file(RELATIVE_PATH pkg_to_lib "${pkgdir}" "${libdir}")
file(WRITE "${FEED_I_WORK}/_installed.py"
  "\"\"\"feedclient._installed: written by cmake --install. Where the installed\n"
  "libfeedclient is, relative to this package's directory.\"\"\"\n"
  "LIBDIR = \"${pkg_to_lib}\"\n")
file(GLOB pyfiles "${FEED_I_SRC}/client/python/feedclient/*.py")
file(INSTALL DESTINATION "${pkgdir}" TYPE FILE
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
     FILES ${pyfiles} "${FEED_I_SRC}/client/python/feedclient/py.typed"
           "${FEED_I_WORK}/_installed.py")
# feedclient._fastiter (next() in C), when it was built.
if(NOT FEED_I_FASTITER STREQUAL "")
  file(INSTALL DESTINATION "${pkgdir}" TYPE FILE
       PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                   WORLD_READ WORLD_EXECUTE
       FILES "${FEED_I_FASTITER}")
  # stripped as install(TARGETS) strips the rest (cpack, cmake --install --strip)
  get_filename_component(fastiter_name "${FEED_I_FASTITER}" NAME)
  if(CMAKE_INSTALL_DO_STRIP AND NOT FEED_I_STRIP STREQUAL "")
    execute_process(COMMAND "${FEED_I_STRIP}" "$ENV{DESTDIR}${pkgdir}/${fastiter_name}"
                    RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "feedclient: ${FEED_I_STRIP} failed on ${fastiter_name}")
    endif()
  endif()
endif()
# feedclient.pack, the dataset writer's binding (libfeedpack is in libdir).
file(GLOB packfiles "${FEED_I_SRC}/client/python/feedclient/pack/*.py")
file(INSTALL DESTINATION "${pkgdir}/pack" TYPE FILE
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ FILES ${packfiles})
