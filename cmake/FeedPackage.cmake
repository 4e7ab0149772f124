# cmake/FeedPackage.cmake: `cpack -G DEB` in the build tree makes
# feedd_<version>_<arch>.deb from the install rules of FeedInstall.cmake,
# installed with the prefix /usr (so the config is /etc/feedd/feedd.yaml
# and the unit runs /usr/bin/feedd). One package for a node: the daemon,
# the tools, libfeedclient with its headers, and the Python package.
# Depends comes from dpkg-shlibdeps (and python3); /etc/feedd/feedd.yaml is
# a conffile; the maintainer scripts in cmake/deb/ make the user
# (sysusers.d), the directories (tmpfiles.d) and enable feedd.socket and
# feedd.service without starting them; prerm stops both. The package is a
# release build (FeedInstall.cmake refuses any other) and lintian finds no
# error in it (tests/install/check_deb.sh). FEED_DEB_MAINTAINER names the
# maintainer in the control file and the changelog.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME feedd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${FEED_DEB_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "per-node daemon that feeds training jobs with batches through shared memory")
# Lines of at most 80 columns (lintian): the control file keeps them.
set(CPACK_PACKAGE_DESCRIPTION "feedd reads packed datasets once, decodes and augments them on CPU
workers and hands finished batches to every training process on the node
through shared memory. Includes feedctl, feedpack, feedbench, libfeedclient
and the feedclient Python package.")
# Install with DESTDIR and the real prefix, so install-time paths
# (cmake/FeedInstallTime.cmake) are those of the installed system.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Debug info names the build tree; the package carries none of it.
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# A shlibs file for libfeedclient.so.0, so programs packaged against it
# get a Depends on feedd too.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# The Python package (dist-packages/feedclient) runs on Debian's python3
# and reads batches into numpy arrays; feedd itself needs neither.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd, python3-numpy")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-torch")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(FEED_DEB_DIR ${CMAKE_CURRENT_LIST_DIR}/deb)
# triggers: ldconfig runs after the package's libfeedclient.so.0 lands.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${FEED_DEB_DIR}/conffiles ${FEED_DEB_DIR}/postinst ${FEED_DEB_DIR}/prerm ${FEED_DEB_DIR}/postrm
  ${FEED_DEB_DIR}/triggers)

include(CPack)
