
BlogitsJP6Tå:ßX»r`;²^\:z7‡;òJvº91:T•‚;Ðõh;sl*»$Oå:X»7r`;xk\:8‡;pFvºÎ3:˜”‚;Øõh;m*»