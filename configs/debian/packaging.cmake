# The Debian package: `cpack -G DEB` in a build directory makes espgw_VERSION_ARCH.deb from
# the install rules (daemon, espgwctl, the charon plugin, its strongswan.d file, the
# systemd unit, the man pages, the examples) and the maintainer scripts next to this file.
# docs/packaging.md has the commands.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME espgw)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "espgw maintainers <espgw@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "userspace IPsec ESP gateway for strongSwan's charon")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
  "espgw does the ESP data plane of IPsec tunnels in userspace, spreading the crypto of\n"
  "each SA over all cores and delivering packets in sequence order. strongSwan's charon\n"
  "negotiates the tunnels from swanctl.conf through the espgw plugin, which this package\n"
  "installs together with the daemon, espgwctl and a hardened systemd unit.")
# Stripped binaries, as Debian ships them (the build tree keeps the debug info).
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)

# Library dependencies from the binaries (libipsec-mb1, libmnl0, libnftables1, libnftnl11,
# libssl3, libsystemd0, ...). The plugin's libcharon and libstrongswan live in /usr/lib/ipsec,
# which its RUNPATH names, so dpkg-shlibdeps finds their packages too.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS /usr/lib/ipsec)

# The plugin is compiled against one strongSwan release's headers and uses charon's
# internal structures, which any upstream release may change, so the package accepts any
# Debian revision of that release and no other: VERSION <= x < NEXT~, NEXT the release
# with the last component one higher (5.9.8 -> 5.9.9~; "~" sorts before anything, so
# 5.9.9~rc1 is out too). charon itself is either Debian's (strongswan-charon, started by
# strongswan-starter) or charon-systemd (strongswan.service); both depend on exactly their
# own libstrongswan, so the pin above holds them to the same release. swanctl is only
# recommended (espgw also runs from a static SA file, without charon).
if(NOT ESPGW_STRONGSWAN_VERSION MATCHES "^([0-9.]*\\.)?([0-9]+)$")
  message(FATAL_ERROR "cannot pin strongSwan version '${ESPGW_STRONGSWAN_VERSION}'")
endif()
math(EXPR espgw_swan_last "${CMAKE_MATCH_2} + 1")
set(espgw_swan_next "${CMAKE_MATCH_1}${espgw_swan_last}~")
set(espgw_swan_range "(>= ${ESPGW_STRONGSWAN_VERSION}), %s (<< ${espgw_swan_next})")
set(espgw_depends "")
foreach(swan_package libstrongswan strongswan-libcharon)
  string(REPLACE "%s" "${swan_package}" range "${espgw_swan_range}")
  list(APPEND espgw_depends "${swan_package} ${range}")
endforeach()
list(APPEND espgw_depends "strongswan-charon | charon-systemd")
list(JOIN espgw_depends ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS strongswan-swanctl)

set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_CURRENT_LIST_DIR}/conffiles ${CMAKE_CURRENT_LIST_DIR}/postinst
    ${CMAKE_CURRENT_LIST_DIR}/prerm ${CMAKE_CURRENT_LIST_DIR}/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# Only what `cmake --install` installs for espgw's own component (no test or benchmark
# binaries: those have no install rules).
include(CPack)
