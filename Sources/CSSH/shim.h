#ifndef SQSYNC_CSSH_SHIM_H
#define SQSYNC_CSSH_SHIM_H
#include <stdbool.h>
#include <libssh/libssh.h>
#include <libssh/sftp.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>

/// ssh_options_set takes a void pointer whose pointee type depends on the option;
/// these wrappers give Swift one typed call per option it uses.
/// The type (magic number) of the file system holding `fd`, or -1: Swift's Glibc module
/// does not export statfs. Here because the transports are the only users.
static inline long sqsync_file_system_type(int fd) {
    struct statfs info;
    return fstatfs(fd, &info) == 0 ? (long)info.f_type : -1;
}

static inline int sqsync_ssh_set_string(ssh_session session, enum ssh_options_e option, const char *value) {
    return ssh_options_set(session, option, value);
}

static inline int sqsync_ssh_set_port(ssh_session session, unsigned int port) {
    return ssh_options_set(session, SSH_OPTIONS_PORT, &port);
}

static inline int sqsync_ssh_set_timeout(ssh_session session, long seconds) {
    return ssh_options_set(session, SSH_OPTIONS_TIMEOUT, &seconds);
}

static inline int sqsync_ssh_set_bool(ssh_session session, enum ssh_options_e option, int value) {
    bool flag = value != 0;
    return ssh_options_set(session, option, &flag);
}

/// For options that take an int (SSH_OPTIONS_NODELAY), unlike the bool ones above.
static inline int sqsync_ssh_set_int(ssh_session session, enum ssh_options_e option, int value) {
    return ssh_options_set(session, option, &value);
}

#endif
