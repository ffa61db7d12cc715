/*
 * death.c: learning that the lab stopped.
 *
 * A lab that dies (kill -9, a crash) closes its end of the session's
 * socket and nothing else: the shared rings stay mapped and no completion
 * ever arrives, so a program blocked in ibv_get_cq_event or spinning on
 * ibv_poll_cq would wait forever. A watcher thread, started with the
 * session, sleeps in poll() on the control socket for a hang-up
 * (POLLRDHUP; it never reads, so replies stay with mrv_call). A hang-up is
 * told apart from a session the living lab closed (an admission refusal)
 * as the Go client does (verbs/device.go): the watcher dials the
 * endpoint's name again; refused, or a new connection that hangs up within
 * 200 ms (the lab's listener closing a moment after its sessions, as the
 * dying process's descriptors are released), means the lab stopped.
 *
 * Either way the session is lost: mrv_lost sets mrv_dead, prints one line
 * on stderr ("mrlab: the lab stopped"), writes every CQ's eventfd so
 * ibv_get_cq_event wakes (and returns -1, errno EIO) and every context's
 * async eventfd so ibv_get_async_event returns IBV_EVENT_DEVICE_FATAL, as
 * a NIC that died raises. From then on ibv_poll_cq returns -1 (errno EIO),
 * posts fail with EIO and control verbs fail (the socket is closed). A
 * control call that meets the hang-up first (mrv_call) calls mrv_lost
 * itself, so the message is out before the program can react.
 */
#include "mrv.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int mrv_dead;

static pthread_mutex_t lostmu = PTHREAD_MUTEX_INITIALIZER; /* one verdict */
static pthread_mutex_t regmu = PTHREAD_MUTEX_INITIALIZER;  /* the lists */
static struct mrv_cq *cqs;
static struct mrv_context *ctxs;

void mrv_track_cq(struct mrv_cq *q, int add) {
	pthread_mutex_lock(&regmu);
	struct mrv_cq **pp = &cqs;
	while (*pp && *pp != q)
		pp = &(*pp)->next;
	if (add && !*pp) {
		q->next = cqs;
		cqs = q;
	} else if (!add && *pp) {
		*pp = q->next;
	}
	pthread_mutex_unlock(&regmu);
	/* A CQ created as the lab died still wakes its waiters. */
	if (add && mrv_is_dead())
		mrv_wake_fd(q->evfd);
}

void mrv_track_context(struct mrv_context *x, int add) {
	pthread_mutex_lock(&regmu);
	struct mrv_context **pp = &ctxs;
	while (*pp && *pp != x)
		pp = &(*pp)->next;
	if (add && !*pp) {
		x->next = ctxs;
		ctxs = x;
	} else if (!add && *pp) {
		*pp = x->next;
	}
	pthread_mutex_unlock(&regmu);
	if (add && mrv_is_dead())
		mrv_wake_fd(x->vctx.context.async_fd);
}

void mrv_post_async_all(enum ibv_event_type t) {
	pthread_mutex_lock(&regmu);
	for (struct mrv_context *x = ctxs; x; x = x->next) {
		if (x->evtail - x->evhead < MRV_ASYNC_QUEUE) /* full: the oldest events stand; later ones are dropped */
			x->evq[x->evtail++ % MRV_ASYNC_QUEUE] = (uint8_t)t;
		mrv_wake_fd(x->vctx.context.async_fd);
	}
	pthread_mutex_unlock(&regmu);
}

int mrv_pop_async(struct mrv_context *x, enum ibv_event_type *t) {
	pthread_mutex_lock(&regmu);
	int n = x->evtail != x->evhead;
	if (n) {
		*t = (enum ibv_event_type)x->evq[x->evhead++ % MRV_ASYNC_QUEUE];
		if (x->evtail != x->evhead) /* more left: keep async_fd readable */
			mrv_wake_fd(x->vctx.context.async_fd);
	}
	pthread_mutex_unlock(&regmu);
	return n;
}

void mrv_wake_fd(int fd) {
	uint64_t one = 1;
	if (fd >= 0 && write(fd, &one, sizeof one) < 0) {
		/* EAGAIN: it is readable already */
	}
}

int mrv_is_dead(void) { return __atomic_load_n(&mrv_dead, __ATOMIC_ACQUIRE); }

/* lab_stopped dials the endpoint again: 1 if the lab is gone (refused, or
 * the new connection hangs up within 200 ms), 0 if it still serves. */
static int lab_stopped(void) {
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return 1; /* cannot tell: a session is lost either way */
	if (connect(s, (struct sockaddr *)&mrv_s.addr, mrv_s.addrlen) < 0) {
		close(s);
		return 1;
	}
	struct pollfd p = {s, POLLRDHUP, 0};
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int left = 200, n;
	while ((n = poll(&p, 1, left)) < 0 && errno == EINTR) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		left = 200 - (int)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
		if (left < 0)
			left = 0;
	}
	close(s);
	return n > 0;
}

void mrv_lost(void) {
	pthread_mutex_lock(&lostmu);
	if (mrv_is_dead()) {
		pthread_mutex_unlock(&lostmu);
		return;
	}
	if (lab_stopped())
		fprintf(stderr, "mrlab: the lab stopped (its verbs endpoint closed)\n");
	else
		fprintf(stderr, "mrlab: the lab closed this program's verbs session\n");
	fflush(stderr);
	__atomic_store_n(&mrv_dead, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&lostmu);
	pthread_mutex_lock(&regmu);
	for (struct mrv_cq *q = cqs; q; q = q->next)
		mrv_wake_fd(q->evfd);
	for (struct mrv_context *x = ctxs; x; x = x->next)
		mrv_wake_fd(x->vctx.context.async_fd);
	pthread_mutex_unlock(&regmu);
}

static void *watch(void *arg) {
	int s = (int)(intptr_t)arg;
	struct pollfd p = {s, POLLRDHUP, 0};
	for (;;) {
		int n = poll(&p, 1, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
			break;
	}
	mrv_log("the lab's verbs endpoint hung up");
	mrv_lost();
	return NULL;
}

int mrv_start_watch(int sock) {
	/* Every signal blocked: the program's handlers (perftest's SIGALRM
	 * for -D) run on its own threads, as they would without the lab. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, 64 * 1024);
	pthread_t t;
	int e = pthread_create(&t, &a, watch, (void *)(intptr_t)sock);
	pthread_attr_destroy(&a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return e;
}
