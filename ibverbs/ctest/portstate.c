/*
 * portstate.c: prints the first device's port state, then each
 * asynchronous event with the port state after it, until it has seen
 * N events (argv[1], default 2) or 60 s passed; with argv[2], it creates
 * that file once it printed the first state (so a test knows when to
 * fault the links). Run with the library
 * preloaded (mrlab exec --ibverbs HOST -- ./portstate 2) while the host's
 * links go down and up (mrlab fault link HOST-p0 down ...). Each line:
 *
 *	state ACTIVE|DOWN
 *	event PORT_ERR|PORT_ACTIVE|DEVICE_FATAL|... port N state ACTIVE|DOWN
 *
 * Exit 0 once it saw N events, 1 on a timeout or an error.
 */
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char *state(struct ibv_context *c) {
	struct ibv_port_attr a;
	if (ibv_query_port(c, 1, &a))
		return "?";
	return a.state == IBV_PORT_ACTIVE ? "ACTIVE" : a.state == IBV_PORT_DOWN ? "DOWN" : "OTHER";
}

int main(int argc, char **argv) {
	int want = argc > 1 ? atoi(argv[1]) : 2;
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0]) {
		fprintf(stderr, "portstate: no device\n");
		return 1;
	}
	struct ibv_context *c = ibv_open_device(l[0]);
	if (!c) {
		fprintf(stderr, "portstate: cannot open %s\n", ibv_get_device_name(l[0]));
		return 1;
	}
	printf("state %s\n", state(c));
	fflush(stdout);
	if (argc > 2) {
		FILE *f = fopen(argv[2], "w");
		if (!f) {
			perror("portstate: creating the ready file");
			return 1;
		}
		fclose(f);
	}
	time_t end = time(NULL) + 60;
	for (int n = 0; n < want;) {
		struct pollfd p = {c->async_fd, POLLIN, 0};
		int left = (int)(end - time(NULL));
		if (left <= 0 || poll(&p, 1, left * 1000) <= 0) {
			printf("timeout after %d events\n", n);
			return 1;
		}
		struct ibv_async_event ev;
		if (ibv_get_async_event(c, &ev)) {
			printf("ibv_get_async_event failed\n");
			return 1;
		}
		printf("event %s port %d state %s\n",
		       ev.event_type == IBV_EVENT_PORT_ERR      ? "PORT_ERR"
		       : ev.event_type == IBV_EVENT_PORT_ACTIVE ? "PORT_ACTIVE"
		       : ev.event_type == IBV_EVENT_DEVICE_FATAL ? "DEVICE_FATAL"
								 : "OTHER",
		       ev.element.port_num, state(c));
		fflush(stdout);
		ibv_ack_async_event(&ev);
		n++;
	}
	return 0;
}
