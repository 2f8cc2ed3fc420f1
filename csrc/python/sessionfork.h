/*
 * sessionfork.h: a forked child's copy of a running Session: inert (see sessionfork.c).
 */
#ifndef XSP_SESSIONFORK_H
#define XSP_SESSIONFORK_H

#include "sessionobj.h"

/* 1 in a forked child whose parent was recording self at the fork: marked by the at-fork
 * handler (os.fork), or recognised by its pid in a child made by a C-level fork that skipped
 * the handler; else 0.  Cannot fail. */
int xsp_pyfork_is_forked(xsp_pysession *self);

/* 1 when self is a forked child's inert copy, for the calls that then do nothing: the profile
 * is made inert first if the handler did not run, and one warning per process says so (errors
 * from it are dropped; an exception already set is kept).  Else 0.  Cannot fail. */
int xsp_pyfork_inert(xsp_pysession *self);

#endif
