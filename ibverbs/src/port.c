/*
 * port.c: the port's state follows the host's links.
 *
 * The lab writes which of the host NIC's ports (one per plane) have their
 * link up into the doorbell page's ports_up word (MV_PORTS_UP), within a
 * millisecond of lab time after a link changes, and wakes the word's
 * futex waiters (docs/verbs-abi.md). ibv_query_port reads it: the port is
 * IBV_PORT_ACTIVE while any plane's link is up and IBV_PORT_DOWN once all
 * are down (one port stands for the host's NIC, whose transports spread
 * over the planes; a plane down is the fabric's business, not the port's).
 * A thread sleeps on the word (FUTEX_WAIT: no polling) and turns each
 * ACTIVE/DOWN change into IBV_EVENT_PORT_ERR or IBV_EVENT_PORT_ACTIVE on
 * every open context's async queue, as a NIC raises them.
 */
#include "mrv.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

static uint32_t ports_mask(void) {
	uint32_t n = mrv_s.hello.ports;
	return n >= 31 ? 0x7fffffffu : (1u << n) - 1;
}

static int active(uint32_t w) {
	if (!(w & MV_PORTS_VALID))
		return 1; /* a lab that does not follow its links: as before, ACTIVE */
	return (w & ports_mask()) != 0;
}

int mrv_port_active(void) {
	if (!mrv_s.dbpage)
		return 1;
	return active(mv_load(mrv_s.dbpage, MV_PORTS_UP));
}

static void *portwatch(void *arg) {
	(void)arg;
	uint32_t *w = mv_word(mrv_s.dbpage, MV_PORTS_UP);
	uint32_t seen = __atomic_load_n(w, __ATOMIC_SEQ_CST);
	while (!mrv_is_dead()) {
		/* Sleeps while the word still reads seen; not FUTEX_PRIVATE: the
		 * page is shared with the lab. A lab that dies leaves this thread
		 * asleep, which costs nothing. */
		syscall(SYS_futex, w, FUTEX_WAIT, seen, NULL, NULL, 0);
		uint32_t now = __atomic_load_n(w, __ATOMIC_SEQ_CST);
		if (now == seen)
			continue; /* spurious, or EINTR */
		int was = active(seen), is = active(now);
		seen = now;
		if (was != is) {
			mrv_log("port %s (links up: %#x)", is ? "ACTIVE" : "DOWN", now & ports_mask());
			mrv_post_async_all(is ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
		}
	}
	return NULL;
}

int mrv_start_portwatch(void) {
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, 64 * 1024);
	pthread_t t;
	int e = pthread_create(&t, &a, portwatch, NULL);
	pthread_attr_destroy(&a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return e;
}
