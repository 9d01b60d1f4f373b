PATHS = ()
