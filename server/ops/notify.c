/* SPDX-License-Identifier: Apache-2.0 */
/* notify.c - what the service manager is told: ready once the server
 * serves, reloading around a SIGHUP, stopping when it shuts down.
 *
 * The unit is Type=notify, so systemd counts the service started only when
 * READY=1 comes: after the ports are bound and given out (rpcbind or the
 * built-in portmapper), which is when a client's mount can succeed, and when
 * units ordered after this one may start.  A build without libsystemd
 * (WITH_SYSTEMD off) keeps the calls and sends nothing; so does a server
 * that no service manager started (sd_notify finds no NOTIFY_SOCKET).
 */
#include <stdio.h>
#include <time.h>

#include "ops.h"

#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>

/* A failed notification changes nothing the server does: systemd then
 * times the start out, which says more than a log line here would. */
static void notify(const char *state)
{
	(void)sd_notify(0, state);
}
#else
static void notify(const char *state)
{
	(void)state;
}
#endif

void srv_notify_ready(const char *status)
{
	char msg[512];

	snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s", status);
	notify(msg);
}

/* MONOTONIC_USEC lets systemd 253 and later (Type=notify-reload) match this
 * reload to the signal it sent; older ones ignore it. */
void srv_notify_reloading(void)
{
	struct timespec ts;
	char msg[128];

	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(msg, sizeof(msg), "RELOADING=1\nSTATUS=reloading\nMONOTONIC_USEC=%llu",
		 (unsigned long long)ts.tv_sec * 1000000ull +
		     (unsigned long long)ts.tv_nsec / 1000);
	notify(msg);
}

void srv_notify_stopping(void)
{
	notify("STOPPING=1\nSTATUS=shutting down");
}
