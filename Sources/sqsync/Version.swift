/// The release number: `sqsync --version`, and read by the Makefile to name the `.deb` and the
/// tarball, so it is written down only here.
let sqsyncVersion = "0.3.0"
