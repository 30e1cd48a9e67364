/*
 * The config.h strongSwan's headers expect (they are compiled with -include config.h).
 * Debian builds 5.9.8 without running configure here, so this states what its build
 * defined wherever a header's layout or inline code depends on it. ME (mediation) matters
 * most: Debian enables it, and it changes the layout of daemon_t and others.
 */
#ifndef ESPGW_STRONGSWAN_CONFIG_H
#define ESPGW_STRONGSWAN_CONFIG_H

#define CONFIG_H_INCLUDED 1
#define ME 1
#define HAVE_STDBOOL_H 1
#define HAVE_ALLOCA_H 1
#define HAVE_SYS_PARAM_H 1
#define HAVE_CLOCK_GETTIME 1
#define HAVE_CONDATTR_CLOCK_MONOTONIC 1
#define HAVE_GCC_ATOMIC_OPERATIONS 1
#define HAVE_EXPLICIT_BZERO 1
#define HAVE_MEMRCHR 1
#define HAVE_FMEMOPEN 1
#define HAVE_CLOSEFROM 1
#define HAVE_SIGWAITINFO 1
#define HAVE_INT128 1

#endif
