// The one way the store's listening socket is opened: by rank 0 on MASTER_PORT (tcp_store.cpp),
// or by `train --devices N` on a port the kernel picks, handed down to rank 0 (session.cpp).
#pragma once

namespace lt::dist {

// A TCP socket listening on every address at `port` (0: one the kernel picks), SO_REUSEADDR;
// -1 with errno set when it cannot be opened, bound or made to listen.
int tcp_listen(int port);

}  // namespace lt::dist
